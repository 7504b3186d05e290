"""Serve the status page on 127.0.0.1 under /hubflow, as Airflow's API server mounts it.

Usage: ``python -m tests.plugins.status_page.serve_status_page --registry REGISTRY --port PORT``
(run from the repository root with ``plugins/`` on PYTHONPATH). The browser test starts it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from hubflow_plugins.status_page.status_app import create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--registry", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    parent = FastAPI()
    parent.mount("/hubflow", create_app(args.registry))
    uvicorn.run(parent, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
