#!/usr/bin/env python3
"""Checks every internal link of the built book (target/book by default): each relative href
names a page that exists, and each #fragment an id on that page. With `--markdown FILE...`,
checks instead that each relative link of those Markdown files (README.md) names a file that
exists. External links (a scheme) are not followed. Exits 1 and lists the broken links when
there are any."""

import html.parser
import pathlib
import re
import sys
import urllib.parse


def check_markdown(files):
    broken = []
    checked = 0
    for name in files:
        f = pathlib.Path(name)
        for target in re.findall(r"\]\(([^)\s]+)\)", f.read_text(encoding="utf-8")):
            url = urllib.parse.urlsplit(target)
            if url.scheme or url.netloc or not url.path:
                continue
            checked += 1
            if not (f.parent / urllib.parse.unquote(url.path)).exists():
                broken.append(f"{f}: {target}: no such file")
    for b in broken:
        print(f"check-book-links: {b}", file=sys.stderr)
    print(f"check-book-links: {checked} relative links in {len(files)} Markdown files, {len(broken)} broken")
    return 1 if broken else 0


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name == "href" and value and tag == "a":
                self.hrefs.append(value)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--markdown":
        return check_markdown(sys.argv[2:])
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/book").resolve()
    pages = {}
    for f in root.rglob("*.html"):
        p = Page()
        p.feed(f.read_text(encoding="utf-8"))
        pages[f.resolve()] = p
    if not pages:
        print(f"check-book-links: no pages under {root}", file=sys.stderr)
        return 1
    broken = []
    checked = 0
    for f, page in sorted(pages.items()):
        # mdbook's theme links to itself (fonts, the print page, toc.html): only the
        # chapters' own links are ours.
        if f.name in ("print.html", "toc.html", "404.html"):
            continue
        for href in page.hrefs:
            url = urllib.parse.urlsplit(href)
            if url.scheme or url.netloc or href.startswith("mailto:"):
                continue
            target = f if not url.path else (f.parent / urllib.parse.unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if target.suffix != ".html":
                if not target.exists():
                    broken.append(f"{f.relative_to(root)}: {href}: no such file")
                continue
            checked += 1
            if target not in pages:
                broken.append(f"{f.relative_to(root)}: {href}: no such page")
            elif url.fragment and urllib.parse.unquote(url.fragment) not in pages[target].ids:
                broken.append(f"{f.relative_to(root)}: {href}: no such heading on that page")
    for b in broken:
        print(f"check-book-links: {b}", file=sys.stderr)
    print(f"check-book-links: {checked} internal links in {len(pages)} pages, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
