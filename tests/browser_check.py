"""Open a report in headless Chromium (Playwright) and print what a reviewer would see, as JSON.

With "-" as the filter text, only loads the page, screenshots all of it and counts its
links and tables (the comparison and history pages). Run in its own process by tests/test_report.py, so Playwright's greenlets never share
an interpreter with the harness's threads.
"""

import json
import sys

from playwright.sync_api import sync_playwright


def main(page_path: str, chromium: str, screenshot: str, filter_text: str) -> None:
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto("file://" + page_path)
        if filter_text == "?":  # markup planted in the inputs: did any of it come alive?
            live = page.evaluate(
                """() => ({
                  planted: document.querySelectorAll('.pwn, #pwn, [onerror], [onmouseover]').length,
                  scripts: [...document.scripts].filter(s => s.textContent.includes('pwned')).length,
                  pwned: window.__pwned === 1,
                  js_links: [...document.querySelectorAll('a')].filter(
                    a => a.protocol === 'javascript:' || !a.href.startsWith('file://')).length,
                  links: document.querySelectorAll('a').length,
                  text: document.body.innerText.includes('<b class=pwn'),
                })"""
            )
            page.mouse.move(300, 300)
            browser.close()
            print(json.dumps({"errors": errors, **live}))
            return
        if filter_text == "-":  # a page with no timeline (compare, history): the whole page
            page.screenshot(path=screenshot, full_page=True)
            links = page.locator("a").count()
            tables = page.locator("table").count()
            browser.close()
            print(json.dumps({"errors": errors, "links": links, "tables": tables}))
            return
        box = page.locator("#timeline").bounding_box()
        nested = (
            page.locator("#timeline circle").count() - page.locator("#timeline > circle").count()
        )
        action_lines = page.locator("#timeline > line[stroke='#d32f2f']").count()
        page.locator("#timeline").screenshot(path=screenshot)
        page.fill("#filter", filter_text)
        visible = page.locator("#broken tr:visible").count()
        browser.close()
    print(
        json.dumps(
            {
                "errors": errors,
                "box": box,
                "nested": nested,
                "action_lines": action_lines,
                "visible": visible,
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
