"""How logged file paths map to the landing root, for local paths and ``abfss://`` (no network needed)."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from hubflow.operations.archive import LandingRoot

LAKE = "abfss://lake@acct.dfs.core.windows.net"


def landing_root(url: str) -> LandingRoot:
    options = {"account_name": "acct", "anon": True} if "://lake" in url else {}
    fs, root = fsspec.core.url_to_fs(url, **options)
    return LandingRoot(url, fs, root)


@pytest.mark.parametrize(
    ("logged", "relative", "why"),
    [
        (f"{LAKE}/landing/r%C3%A9gion%3Deu/a%20b.json", "région=eu/a b.json", None),
        (f"{LAKE}/landing/100%25.json", "100%.json", None),
        ("abfss://lake@other.dfs.core.windows.net/landing/a.json", None, "storage account"),
        ("abfss://archive@acct.dfs.core.windows.net/landing/a.json", None, "another container"),
        (f"{LAKE}/landing2/a.json", None, "outside the landing root"),
        (f"{LAKE}/landing/../x.json", None, "'..'"),
        (f"{LAKE}/landing/a/%2E%2E/%2E%2E/x.json", None, "'..'"),
        ("file:///landing/a.json", None, "another filesystem"),
    ],
)
def test_abfss_log_paths(logged: str, relative: str | None, why: str | None) -> None:
    result, refusal = landing_root(f"{LAKE}/landing").relative(logged)
    assert result == relative
    assert (refusal is None) if why is None else (why in refusal)


def test_container_only_landing_url_accepts_account_qualified_log_paths() -> None:
    assert landing_root("az://lake/landing").relative(f"{LAKE}/landing/a.json") == ("a.json", None)


def test_local_log_paths_both_spellings(tmp_path: Path) -> None:
    root = landing_root(str(tmp_path / "landing"))
    assert root.relative(f"file://{tmp_path}/landing/d/a%20b.json") == ("d/a b.json", None)
    assert root.relative(f"file:{tmp_path}/landing/d/x.json") == ("d/x.json", None)
    assert root.relative(f"file://{tmp_path}/landing-old/x.json")[1] == "is outside the landing root"


def test_symlink_out_of_the_landing_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "landing").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "landing" / "link").symlink_to(tmp_path / "elsewhere")
    _, why = landing_root(str(tmp_path / "landing")).relative(f"file://{tmp_path}/landing/link/x.json")
    assert why == "is outside the landing root"
