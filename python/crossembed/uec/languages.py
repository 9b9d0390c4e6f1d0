"""What can be known of a query's language without labels, and which languages each encoder reads.

* :class:`LangidIdentifier` - language identification by ``langid.py``
  (Lui and Baldwin, 2012): a naive Bayes model over byte n-grams of 97
  languages that ships inside the package (no download). Its
  :meth:`~LangidIdentifier.log_likelihoods` are per-language log scores of a
  text; :func:`language_posterior` tilts them into ``p(language | text)``
  towards the languages the ensemble was fitted on. ``langid`` is the optional
  ``lang`` extra (``pip install "crossembed[lang]"``).
* :data:`MODEL_LANGUAGES` / :func:`model_languages` - the languages a model
  card gives for the encoders :func:`crossembed.encoders.load_encoder` names
  (metadata a user has; the encoders stay black boxes). ``None`` means the
  model reads every language the identifier knows.

An identifier is any object with ``languages`` (ISO 639-1 codes) and
``log_likelihoods(texts) -> (n, len(languages))``, plus ``get_config()`` to
be saved with an ensemble (:func:`identifier_from_config` rebuilds the
built-in one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from crossembed._config import Configured
from crossembed._rows import softmax_rows

__all__ = [
    "LangidIdentifier",
    "MODEL_LANGUAGES",
    "identifier_from_config",
    "language_posterior",
    "model_languages",
]

#: languages per known encoder name (model cards); None: multilingual (every language)
MODEL_LANGUAGES: Dict[str, Optional[Tuple[str, ...]]] = {
    "minilm": ("en",),
    "minilm-l3": ("en",),
    "mpnet": ("en",),
    "e5": None,
    # Universal Sentence Encoder multilingual v3: its 16 languages
    "use": ("ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"),
}


def model_languages(name: Optional[str]) -> Optional[Tuple[str, ...]]:
    """The languages :data:`MODEL_LANGUAGES` gives for an encoder name; None when multilingual or unknown."""
    return MODEL_LANGUAGES.get(name) if isinstance(name, str) else None


@dataclass(frozen=True)
class LangidIdentifier(Configured):
    """``langid.py``'s naive Bayes language identifier (97 languages, model inside the package).

    The model is loaded on first use (about a second) and kept by this object.
    """

    kind = "langid"

    def __post_init__(self):
        try:
            import langid.langid  # noqa: F401
        except ImportError:
            raise ImportError(
                "LangidIdentifier (the query-language signal of LanguageRouting, the default routing of an "
                "ensemble with a monolingual encoder) needs langid: pip install 'crossembed[lang]'; or pass "
                "routing=LanguageRouting(languages, identifier=None) or routing=RankRouting()"
            ) from None

    def _loaded(self):
        model = self.__dict__.get("_model")
        if model is None:  # the packaged model, read once per object (it never changes after)
            from langid.langid import LanguageIdentifier
            from langid.langid import model as packaged

            model = LanguageIdentifier.from_modelstring(packaged, norm_probs=False)
            object.__setattr__(self, "_model", model)
        return model

    @property
    def languages(self) -> Tuple[str, ...]:
        """The ISO 639-1 codes the model knows, in the order of :meth:`log_likelihoods`' columns."""
        return tuple(self._loaded().nb_classes)

    def log_likelihoods(self, texts: Sequence[str]) -> np.ndarray:
        """langid's log score of each text per language, shape ``(n, L)`` float64.

        ``log p(language) + log p(text | language)`` of its naive Bayes model (its class prior included),
        up to a per-text constant.
        """
        m = self._loaded()
        if not len(texts):
            return np.zeros((0, len(m.nb_classes)))
        counts = np.stack([m.instance2fv(t) for t in texts]).astype(np.float32)
        return (counts @ m.nb_ptc + m.nb_pc[None, :]).astype(np.float64)


def identifier_from_config(config: Any):
    """The identifier a ``get_config()`` dict describes (``{"kind": "langid"}``); None stays None."""
    if config is None or hasattr(config, "log_likelihoods"):
        return config
    if isinstance(config, dict) and config.get("kind") == LangidIdentifier.kind:
        return LangidIdentifier()
    raise ValueError(f"identifier must be None, an identifier object or a langid config, got {config!r}")


def language_posterior(
    log_likelihoods: np.ndarray, languages: Sequence[str], fit_languages: Sequence[str], prior: float
) -> np.ndarray:
    """``p(l | text) ∝ pi_l exp(s_l(text))`` of shape ``(n, L)``, ``s`` the identifier's log scores.

    ``pi_l = prior / |F|`` for ``l`` in ``fit_languages`` (F), ``(1 - prior) / (L - |F|)`` for
    the others: the queries are expected in the fit's languages with odds ``prior : 1 - prior``
    before the text is read. Languages of F the identifier does not know are ignored (with none
    known ``pi`` is uniform).
    """
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    in_fit = np.isin(np.asarray(languages), list(fit_languages))
    n_fit, n_other = int(in_fit.sum()), int((~in_fit).sum())
    if n_fit == 0 or n_other == 0:
        log_prior = np.zeros(len(languages))
    else:
        log_prior = np.where(in_fit, np.log(prior / n_fit), np.log((1.0 - prior) / n_other))
    return softmax_rows(ll + log_prior[None, :])
