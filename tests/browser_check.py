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
        if filter_text == "review":  # what a reviewer reads and clicks, from any page
            page.screenshot(path=screenshot, full_page=True)
            seen = page.evaluate(REVIEW_JS)
            seen["broken_links"] = []
            for href in seen["hrefs"]:  # followed in the browser, one by one
                other = browser.new_page()
                try:
                    response = other.goto(href)
                    if response is not None and not response.ok:
                        seen["broken_links"].append(f"{href}: {response.status}")
                except Exception as e:  # net::ERR_FILE_NOT_FOUND and the like
                    seen["broken_links"].append(f"{href}: {str(e).splitlines()[0]}")
                other.close()
            browser.close()
            print(json.dumps({"errors": errors, **seen}))
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


# the visible text, every link's target, and each vertical line of a timeline against
# the labels drawn beside it (a label within a few pixels, not empty, inside the svg)
REVIEW_JS = """() => {
  const unlabelled = [];
  let lines = 0;
  for (const svg of document.querySelectorAll('svg')) {
    const width = svg.viewBox.baseVal ? svg.viewBox.baseVal.width : svg.width.baseVal.value;
    for (const cls of ['act', 'mark']) {
      const labels = [...svg.querySelectorAll('text.' + cls)].map(t => {
        const b = t.getBBox();
        return {x: t.x.baseVal[0].value, left: b.x, right: b.x + b.width,
                text: t.textContent.trim()};
      });
      for (const line of svg.querySelectorAll('line.' + cls)) {
        lines += 1;
        const x = line.x1.baseVal.value;
        const ok = labels.some(l => Math.abs(l.x - x) <= 8 && l.text &&
                                    l.left >= 0 && l.right <= width + 1);
        if (!ok) unlabelled.push(svg.id + ': ' + line.textContent.trim());
      }
    }
  }
  const zoom = [...document.querySelectorAll('h2')].find(
    h => h.textContent.startsWith('The disruption, up close'));
  return {
    text: document.body.innerText,
    hrefs: [...document.querySelectorAll('a[href]')].map(a => a.href),
    lines: lines,
    unlabelled: unlabelled,
    zoom: zoom ? zoom.textContent : null,
  };
}"""


if __name__ == "__main__":
    main(*sys.argv[1:5])
