"""Start the MASCOT app: `python app.py [--host H] [--port P] [--backend B] [--model M] [--mode MODE]`.

Every flag also reads a `MASCOT_<NAME>` environment variable (see app/settings.py). Passwords are read
from the environment only (MASCOT_ADMIN_PASSWORD, or MASCOT_AUTH for the optional chat login), never
from a flag, so they do not show in the process list."""

from __future__ import annotations

import argparse
import logging

from mascot.settings import apply_process_defaults


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("host", "backend", "model", "mode", "pack", "dtype", "checkpoints_dir", "runs_dir", "data_dir",
                 "openai_base_url", "annotation_db_url", "admin_users_file"):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--annotate-only", action="store_true", default=None,
                   help="serve only the blind annotator page (/ redirects to /annotate/)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    apply_process_defaults()  # before any library starts an OpenMP thread pool
    from app.server import serve
    from app.settings import Settings
    from mascot.files.model_files import use_cache_dir

    settings = Settings.from_env(**vars(args))
    use_cache_dir(settings.cache_dir)
    serve(settings)


if __name__ == "__main__":
    main()
