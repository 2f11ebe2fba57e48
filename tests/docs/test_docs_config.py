"""The configuration page cannot drift: its table is the real parser's flags and every variable.

``python tests/docs/config_table.py`` regenerates the flag rows after a flag changes.
"""

from __future__ import annotations

from config_table import (
    flag_rows,
    is_flag_row,
    page_table,
    row_variable,
    variables_anywhere,
    variables_in_code,
)


def test_the_flag_rows_are_the_parser_s() -> None:
    _, rows, _ = page_table()
    on_page = [r for r in rows if is_flag_row(r)]
    generated = flag_rows()
    missing = sorted(set(generated) - set(on_page))
    stale = sorted(set(on_page) - set(generated))
    assert (missing, stale) == ([], []), "run: python tests/docs/config_table.py"
    assert on_page == generated, "the rows are out of order: python tests/docs/config_table.py"


def test_every_variable_the_code_reads_or_sets_has_a_row() -> None:
    _, rows, _ = page_table()
    on_page = {v for r in rows if (v := row_variable(r))}
    assert sorted(variables_in_code() - on_page) == []
    assert sorted(on_page - variables_anywhere()) == []  # no row for a name nothing uses


def test_every_row_is_a_flag_or_a_variable() -> None:
    _, rows, _ = page_table()
    assert [r for r in rows if not is_flag_row(r) and not row_variable(r)] == []


def test_a_new_flag_is_caught(monkeypatch) -> None:
    """The check can fail: a flag added to the parser is missing from the page."""
    import ringfence.cli._tools as tools_verb

    real = tools_verb.register

    def register(sub):
        real(sub)
        tools = sub.choices["tools"]
        lister = next(a for a in tools._actions if a.dest == "tools_verb").choices["list"]
        lister.add_argument("--brand-new-flag", action="store_true", help="new")

    monkeypatch.setattr(tools_verb, "register", register)
    _, rows, _ = page_table()
    assert "| `--brand-new-flag` | `tools list` | new |" in set(flag_rows()) - set(rows)
