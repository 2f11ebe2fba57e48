"""The tier tables in tiers.py name modules and folders that exist (a renamed module would
silently move its slow tests into ``make test-fast``)."""

from __future__ import annotations

from pathlib import Path

from tiers import FOLDER_TIERS, MODULE_TIERS

REPO = Path(__file__).resolve().parents[1]


def test_every_tiered_module_and_folder_exists() -> None:
    named = [*FOLDER_TIERS, *(m for modules in MODULE_TIERS.values() for m in modules)]
    assert [n for n in named if not (REPO / n).exists()] == []
