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


def test_the_pdf_link_appears_only_when_the_pdf_exists(tmp_path: Path) -> None:
    (tmp_path / "book").mkdir()
    intro = tmp_path / "book" / "intro.html"
    intro.write_text(f"<h1>x</h1>{pdf.PDF_SLOT}<p>rest</p>", encoding="utf-8")
    assert not pdf.link_pdf(tmp_path) and "probeguard-pdf\"" not in intro.read_text(encoding="utf-8")
    (tmp_path / pdf.PDF_NAME).write_bytes(b"%PDF-1.4\n")
    assert pdf.link_pdf(tmp_path)
    text = intro.read_text(encoding="utf-8")
    assert 'class="reference download probeguard-pdf" href="../probeguard-companion.pdf"' in text
    assert pdf.link_pdf(tmp_path) and text == intro.read_text(encoding="utf-8")  # idempotent
    src = (Path(__file__).resolve().parents[1] / "book" / "intro.md").read_text(encoding="utf-8")
    assert pdf.PDF_SLOT in src and "probeguard-companion.pdf" not in src  # no link in the source
