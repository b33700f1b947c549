//! The report as a reader sees it: `report.html` opened in a headless
//! Chromium with every network path closed, its tables read back from the
//! page the browser built, and compared with `report.json` and with the
//! terminal's table.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// A table as the page or the JSON holds it.
#[derive(Debug, PartialEq)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// Checks that `dir/report.html` renders in a browser with no network and
/// that its tables are `report`'s `tables`, whose results are its `rows`
/// and the terminal's (`stdout`).
pub fn the_report_renders_offline_with_the_json_s_tables(dir: &Path, report: &Value, stdout: &str) {
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    fetches_nothing(&html);
    let dom = chromium(dir, &["--dump-dom"]);
    let shown = tables_of(&dom);
    let json: Vec<Table> = report["tables"]
        .as_array()
        .expect("report.json has its tables")
        .iter()
        .map(|t| Table {
            title: t["title"].as_str().unwrap().to_string(),
            columns: strings(&t["columns"]),
            rows: t["rows"].as_array().unwrap().iter().map(strings).collect(),
        })
        .collect();
    assert_eq!(shown, json, "the page's tables are report.json's");
    let titles: Vec<&str> = json.iter().map(|t| t.title.as_str()).collect();
    for title in ["Results", "Latency", "Configuration", "Machine"] {
        assert!(titles.contains(&title), "no {title} table: {titles:?}");
    }
    results_are_the_rows(&json[0], report);
    the_terminal_shows_the_same_rows(&json[0], stdout);
    machine_is_described(&json, report);
    a_page_was_drawn(dir);
}

/// The page names no resource to fetch (the SVG namespace is a name, not a
/// fetch) and forbids any by its own policy.
fn fetches_nothing(html: &str) {
    assert!(
        html.contains("Content-Security-Policy\" content=\"default-src 'none'"),
        "the page states no policy"
    );
    let lower = html.to_lowercase();
    for attr in ["src=", "href=", "url(", "@import"] {
        assert!(!lower.contains(attr), "the page may fetch: {attr}");
    }
    let outside = lower
        .match_indices("http")
        .filter(|(i, _)| !lower[*i..].starts_with("http://www.w3.org/2000/svg"))
        .filter(|(i, _)| !lower[*i..].starts_with("http-equiv"))
        .count();
    assert_eq!(outside, 0, "the page names an address");
}

/// Runs headless Chromium on `dir/report.html` with `args`, every way to
/// the network closed (a proxy that refuses, no background fetches), and
/// returns what it printed.
fn chromium(dir: &Path, args: &[&str]) -> String {
    let profile = dir.join("chromium-profile");
    let page = format!("file://{}", dir.join("report.html").display());
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--window-size=1400,3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(&page)
        .output()
        .expect("chromium runs (Debian's package `chromium`; .ci/run installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The screenshot the browser drew of the page: as large as its window,
/// and not blank (a blank page compresses to almost nothing).
fn a_page_was_drawn(dir: &Path) {
    let shot = dir.join("report.png");
    let _ = std::fs::remove_file(&shot);
    chromium(dir, &[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("chromium wrote its screenshot");
    assert_eq!(&png[1..4], b"PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1400, 3000));
    assert!(png.len() > 30_000, "a near-blank page: {} bytes", png.len());
}

/// Each row of the results table is the JSON's row: its scenario and
/// figure, its value to the cell's rounding, its target and whether met.
fn results_are_the_rows(results: &Table, report: &Value) {
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(results.rows.len(), rows.len(), "one line per row");
    assert_eq!(
        results.columns,
        [
            "scenario",
            "figure",
            "value",
            "same-run baseline",
            "ratio",
            "target",
            "met"
        ]
    );
    for (cells, row) in results.rows.iter().zip(rows) {
        assert_eq!(cells[0], row["scenario"].as_str().unwrap());
        assert_eq!(cells[1], row["metric"].as_str().unwrap());
        let value = row["value"].as_f64().unwrap();
        let shown: f64 = cells[2].replace(',', "").parse().unwrap();
        assert!((shown - value).abs() <= 0.51, "{cells:?} shows {value}");
        match row["ratio"].as_f64() {
            Some(ratio) => {
                let shown: f64 = cells[4].parse().unwrap();
                assert!((shown - ratio).abs() <= 0.006, "{cells:?}: {ratio}");
                let name = row["baseline_name"].as_str().unwrap();
                assert!(cells[3].ends_with(name), "{cells:?}: {name}");
            }
            None => assert_eq!((cells[3].as_str(), cells[4].as_str()), ("-", "-")),
        }
        match row["goal"].as_object() {
            Some(goal) => {
                assert_eq!(cells[5], goal["target"].as_str().unwrap());
                let met = if goal["met"].as_bool().unwrap() {
                    "met"
                } else {
                    "NOT met"
                };
                assert_eq!(cells[6], met);
            }
            None => assert_eq!((cells[5].as_str(), cells[6].as_str()), ("-", "-")),
        }
    }
    assert!(
        results
            .rows
            .iter()
            .any(|r| r[6] == "met" || r[6] == "NOT met"),
        "no row has a target"
    );
}

/// Each results row is a line of the terminal's table, its cells in order.
fn the_terminal_shows_the_same_rows(results: &Table, stdout: &str) {
    for cells in &results.rows {
        let found = stdout.lines().any(|line| {
            let mut rest = line;
            line.starts_with(&cells[0])
                && cells.iter().all(|cell| match rest.find(cell.as_str()) {
                    Some(i) => {
                        rest = &rest[i + cell.len()..];
                        true
                    }
                    None => false,
                })
        });
        assert!(found, "the terminal lacks the row {cells:?}");
    }
}

fn machine_is_described(tables: &[Table], report: &Value) {
    let machine = tables.iter().find(|t| t.title == "Machine").unwrap();
    let value = |name: &str| {
        machine
            .rows
            .iter()
            .find(|r| r[0] == name)
            .map(|r| r[1].clone())
            .unwrap_or_else(|| panic!("the machine's {name} is missing"))
    };
    assert_eq!(value("cores"), report["machine"]["cores"].to_string());
    assert_eq!(value("redis"), report["machine"]["redis"].as_str().unwrap());
    assert!(value("postgres").contains('.'), "{}", value("postgres"));
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The tables of the DOM the browser serialized: caption, header cells
/// and the rows' cells, as text.
fn tables_of(dom: &str) -> Vec<Table> {
    let mut tables = Vec::new();
    let mut rest = dom;
    while let Some(start) = rest.find("<table") {
        let end = rest[start..].find("</table>").expect("a closed table") + start;
        let table = &rest[start..end];
        let caption = texts(table, "caption")
            .into_iter()
            .next()
            .unwrap_or_default();
        let head = &table[..table.find("</thead>").unwrap_or(0)];
        let body = &table[table.find("<tbody>").unwrap_or(table.len())..];
        let rows = body
            .split("<tr>")
            .skip(1)
            .map(|row| texts(row, "td"))
            .collect();
        tables.push(Table {
            title: caption,
            columns: texts(head, "th"),
            rows,
        });
        rest = &rest[end..];
    }
    tables
}

/// The text of every `<tag>…</tag>` of `html`, entities decoded.
fn texts(html: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    html.split(&open)
        .skip(1)
        .map(|part| unescape(&part[..part.find(&close).unwrap_or(part.len())]))
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}
