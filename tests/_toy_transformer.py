"""A tiny BERT-shaped sentence-transformers stand-in (pure torch, float64) for last-dense tests.

Same module layout as a ``SentenceTransformer``: ``Transformer`` (with
``auto_model.encoder.layer[-1].output.dense`` / ``.LayerNorm``, a post-LN
output block ``LayerNorm(dense(a) + residual)``) -> ``Pooling`` -> ``Normalize``,
plus ``tokenize``. Importing sentence-transformers costs ~15 s; this costs nothing.
"""

import numpy as np
import torch
from torch import nn

VOCAB = (
    "the a dog cat sat on mat barked loud quiet house tree red blue green of is was and big small river bank".split()
)


class _Output(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.dense = nn.Linear(d_ff, d)
        self.dropout = nn.Dropout(0.0)
        self.LayerNorm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, h, residual):
        return self.LayerNorm(self.dropout(self.dense(h)) + residual)


class _Layer(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.mix = nn.Linear(d, d)
        self.intermediate = nn.Linear(d, d_ff)
        self.output = _Output(d, d_ff)

    def forward(self, x, mask):
        ctx = (x * mask[..., None]).sum(1, keepdim=True) / mask.sum(1, keepdim=True)[..., None]
        att = torch.tanh(self.mix(x + ctx))  # a token-mixing stand-in for attention
        return self.output(nn.functional.gelu(self.intermediate(att)), att)


class _Encoder(nn.Module):
    def __init__(self, d, d_ff, n_layers):
        super().__init__()
        self.layer = nn.ModuleList([_Layer(d, d_ff) for _ in range(n_layers)])


class _Bert(nn.Module):
    def __init__(self, d, d_ff, n_layers):
        super().__init__()
        self.embeddings = nn.Embedding(len(VOCAB) + 3, d)  # 0 pad, 1 cls, 2 sep
        self.encoder = _Encoder(d, d_ff, n_layers)

    def forward(self, input_ids, attention_mask):
        x = self.embeddings(input_ids)
        for layer in self.encoder.layer:
            x = layer(x, attention_mask)
        return x


class Transformer(nn.Module):
    def __init__(self, d, d_ff, n_layers):
        super().__init__()
        self.auto_model = _Bert(d, d_ff, n_layers)

    def forward(self, features):
        mask = features["attention_mask"].to(torch.float64)
        return {**features, "token_embeddings": self.auto_model(features["input_ids"], mask)}


class Pooling(nn.Module):
    def __init__(self, mode="mean"):
        super().__init__()
        self.mode = mode

    def get_config_dict(self):
        return {"pooling_mode": self.mode}

    def forward(self, features):
        tok = features["token_embeddings"]
        mask = features["attention_mask"].to(tok.dtype)
        if self.mode == "mean":
            emb = (tok * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        else:
            emb = tok[:, 0]
        return {**features, "sentence_embedding": emb}


class Normalize(nn.Module):
    def forward(self, features):
        e = features["sentence_embedding"]
        return {**features, "sentence_embedding": e / e.norm(dim=1, keepdim=True)}


class Dense(nn.Module):
    def forward(self, features):
        return features


class ToyST(nn.Sequential):
    def tokenize(self, texts):
        ids = [[1] + [3 + VOCAB.index(w) if w in VOCAB else 0 for w in t.lower().split()] + [2] for t in texts]
        T = max(len(i) for i in ids)
        input_ids = torch.zeros(len(ids), T, dtype=torch.long)
        mask = torch.zeros(len(ids), T, dtype=torch.long)
        for k, i in enumerate(ids):
            input_ids[k, : len(i)] = torch.tensor(i)
            mask[k, : len(i)] = 1
        return {"input_ids": input_ids, "attention_mask": mask}


class ToyEncoder:
    """The encoder protocol over a :class:`ToyST` (``torch_model`` as in SentenceTransformerEncoder)."""

    num_threads = 1

    def __init__(self, *, d=12, d_ff=20, n_layers=2, seed=0, pooling="mean", extra=()):
        torch.manual_seed(seed)
        self.torch_model = ToyST(Transformer(d, d_ff, n_layers), Pooling(pooling), *extra, Normalize()).double()
        self.torch_model.eval()
        self.name = f"toy{seed}"
        self.dim = d

    def encode(self, texts, *, batch_size=32, show_progress_bar=None, role="query"):
        with torch.no_grad():
            out = self.torch_model(self.torch_model.tokenize(list(texts)))
        return out["sentence_embedding"].numpy().astype(np.float32)

    def encode64(self, texts):
        with torch.no_grad():
            return self.torch_model(self.torch_model.tokenize(list(texts)))["sentence_embedding"].numpy()


def sentences(n, seed=0, lo=2, hi=7):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(VOCAB, size=int(rng.integers(lo, hi)))) for _ in range(n)]


def pairs(n, seed=0):
    """Anchor/positive pairs: a sentence and the same words shuffled plus one more."""
    rng = np.random.default_rng(seed)
    out = []
    for s in sentences(n, seed):
        w = s.split()
        rng.shuffle(w)
        out.append((s, " ".join(w + [str(rng.choice(VOCAB))])))
    return out


def forward_with_draws(model, dense, texts, draws, *, chunk=250):
    """Normalised embeddings of ``texts`` with ``[W b] + draws[k]`` for every k: shape (S, n, D).

    One forward per ``chunk`` draws: the texts are repeated and a hook on
    ``dense`` adds each copy's ``dW a + db`` (the real model does the rest).
    """
    prep = getattr(model, "preprocess", None) or model.tokenize
    n, out = len(texts), []
    draws = np.asarray(draws)
    for s in range(0, len(draws), chunk):
        d = torch.from_numpy(draws[s : s + chunk]).to(dense.weight.dtype)  # (k, D, D_in)
        k = len(d)

        def hook(_module, args, output, d=d, k=k):
            a = args[0].reshape(k, n, *args[0].shape[1:])  # (k, n, T, D_ff)
            delta = torch.einsum("kntf,kdf->kntd", a, d[:, :, :-1]) + d[:, None, None, :, -1]
            return output + delta.reshape(output.shape)

        handle = dense.register_forward_hook(hook)
        try:
            with torch.no_grad():
                feats = prep(list(texts) * k)
                out.append(model(feats)["sentence_embedding"].double().cpu().numpy().reshape(k, n, -1))
        finally:
            handle.remove()
    return np.concatenate(out)
