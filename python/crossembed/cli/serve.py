"""``crossembed serve INDEX``: the HTTP/JSON service of :mod:`crossembed.serve` on one saved index."""

from __future__ import annotations

import logging
from pathlib import Path

from crossembed.cli.options import add_num_threads, float_arg, int_arg

__all__ = ["register"]

_LEVELS = ("debug", "info", "warning", "error")


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a saved index over HTTP/JSON (search, add, upsert, remove, save, metrics)",
        description="Serve a UECIndex file (from `crossembed index build` or UECIndex.save) with FastAPI and "
        "uvicorn until SIGTERM/Ctrl+C, which stops gracefully (and saves with --save-on-exit). "
        'Needs pip install "crossembed[serve]"; the API is in docs/serve.md.',
    )
    p.add_argument("index", help="the index file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument(
        "--port", type=int_arg(0, 65535), default=8000, help="port to listen on (default 8000; 0: any free port)"
    )
    p.add_argument("--save-on-exit", action="store_true", help="save the index atomically when stopped")
    p.add_argument("--save-path", help="where POST /save and --save-on-exit write (default: the index file itself)")
    p.add_argument(
        "--allow-save-path", action="store_true", help="let POST /save name its own path (default: refused, 403)"
    )
    p.add_argument(
        "--max-batch",
        type=int_arg(1, 1 << 20),
        default=256,
        help="queries per coalesced index call, and texts per coalesced encoder call (default 256)",
    )
    p.add_argument(
        "--max-batch-tokens",
        type=int_arg(1, 1 << 30),
        default=2048,
        help="estimated tokens (2 + characters / 4 a text) per coalesced encoder call (default 2048)",
    )
    p.add_argument(
        "--batch-wait-ms",
        type=float_arg(0, 1000),
        default=0.0,
        help="wait this long for more requests before a search call (default 0: batch what queued meanwhile)",
    )
    p.add_argument(
        "--max-k", type=int_arg(1, 1 << 24), default=1000, help="largest k a search may ask for (default 1000)"
    )
    p.add_argument(
        "--max-body-mb",
        type=float_arg(0, 1 << 20, above=True),
        default=64.0,
        help="largest request body, MiB (default 64; 413)",
    )
    p.add_argument(
        "--graceful-timeout",
        type=int_arg(0),
        help="seconds to let requests in flight finish when stopped (default: all)",
    )
    p.add_argument(
        "--search-threads",
        type=int_arg(1),
        help="threads of one search call (default: every core but one, at least one)",
    )
    _add_access_options(p)
    p.add_argument(
        "--model-name", help="the model id of /v1/models and /v1/embeddings (default: the index file's stem)"
    )
    p.add_argument("--mmap", action="store_true", help="memory-map the document store instead of reading it")
    p.add_argument(
        "--malloc-arenas",
        type=int_arg(0),
        default=2,
        help="cap glibc's malloc arenas (default 2: a steady RSS under churn, see docs/serve.md; 0: glibc's own "
        "limit of 8 per core; MALLOC_ARENA_MAX in the environment wins)",
    )
    p.add_argument("--log-level", choices=_LEVELS, default="info", help="log level (debug: a line per request)")
    add_num_threads(p)
    p.set_defaults(func=_run)


def _add_access_options(p) -> None:
    """Who may call which route (docs/serve.md, Keys)."""
    p.add_argument(
        "--api-key-file",
        help="keys the routes need, one a line: 'full KEY' (every route) or 'read-only KEY' (search, embed, "
        "models, metrics); /healthz and /readyz stay open (default: no keys, every route open)",
    )
    p.add_argument("--open-metrics", action="store_true", help="let GET /metrics be read without a key")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="listen on a non-loopback --host without --api-key-file (refused otherwise)",
    )


def _config(args):
    from crossembed.serve import ServeConfig
    from crossembed.serve.access import ApiKeys

    save_path = Path(args.save_path if args.save_path else args.index)
    if args.save_on_exit and not save_path.parent.is_dir():
        raise ValueError(f"--save-path: directory {str(save_path.parent)!r} does not exist")
    if args.max_body_mb <= 0:
        raise ValueError(f"--max-body-mb must be > 0, got {args.max_body_mb}")
    return ServeConfig(
        max_body_bytes=int(args.max_body_mb * (1 << 20)),
        max_batch=args.max_batch,
        max_batch_tokens=args.max_batch_tokens,
        batch_wait_ms=args.batch_wait_ms,
        max_k=args.max_k,
        search_threads=args.search_threads,
        save_path=save_path,
        save_on_exit=args.save_on_exit,
        allow_save_path=args.allow_save_path,
        api_keys=None
        if args.api_key_file is None
        else ApiKeys.from_file(args.api_key_file, open_metrics=args.open_metrics),
        model_name=args.model_name if args.model_name is not None else Path(args.index).stem or "crossembed",
    )


def _run(args) -> int:
    from crossembed._glibc import limit_arenas
    from crossembed.serve import run_server
    from crossembed.serve.server import bind_socket, check_exposure
    from crossembed.uec import UECIndex

    if args.malloc_arenas:
        limit_arenas(args.malloc_arenas)  # before the threads that allocate start
    level = getattr(logging, args.log_level.upper())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("crossembed", "uvicorn"):
        logging.getLogger(name).setLevel(level)
    config = _config(args)
    if args.graceful_timeout is not None and args.graceful_timeout < 0:
        raise ValueError(f"--graceful-timeout must be >= 0, got {args.graceful_timeout}")
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        raise ValueError(f"--host/--port: cannot listen on {args.host}:{args.port} ({exc.strerror or exc})") from None
    try:
        check_exposure(sock, config, insecure=args.insecure)
        index = UECIndex.load(args.index, mmap=args.mmap, num_threads=args.num_threads)
    except BaseException:
        sock.close()
        raise
    run_server(index, config=config, graceful_timeout=args.graceful_timeout, sock=sock, insecure=args.insecure)
    return 0
