"""The PDF step (probeguard_core.book.pdf) without a book build: the redirect of the single-page
build is followed to a printable root-level page; a missing Chromium is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from probeguard_core.book import pdf


def test_redirect_followed_to_a_root_level_copy(tmp_path: Path) -> None:
    (tmp_path / "book").mkdir()
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />')
    (tmp_path / "book" / "intro.html").write_text('<link href="_static/x.css"><p>the whole book</p>')
    page = pdf._follow_redirect(tmp_path / "index.html")
    assert page == tmp_path / "book.html" and "the whole book" in page.read_text()


def test_redirect_to_a_missing_page_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />')
    with pytest.raises(pdf.PDFError, match="did not write"):
        pdf._follow_redirect(tmp_path / "index.html")


def test_missing_chromium_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBEGUARD_CHROMIUM", str(tmp_path / "no-chromium"))
    assert pdf.find_chromium() is None
    with pytest.raises(pdf.PDFError, match="Chromium not found"):
        pdf.build_pdf(tmp_path)
    assert not (tmp_path / "_build" / "html" / pdf.PDF_NAME).exists()
