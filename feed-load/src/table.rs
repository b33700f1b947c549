//! The report's tables. Each is built once and written three ways: as
//! text in the terminal, as data in `report.json` (`tables`), and as an
//! HTML table of `report.html`; the cells are the same strings in all three.

use std::fmt::Write as _;

use serde::Serialize;

/// The cell of a value a row does not have.
pub const NONE: &str = "-";

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// The table's caption (in HTML, also its `data-table` attribute).
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, columns: &[&str]) -> Self {
        Table {
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "{}", self.title);
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The title, then the columns padded to their widest cell: numbers to
    /// the right, words to the left.
    pub fn text(&self) -> String {
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([self.columns[i].chars().count()])
                .max()
                .unwrap_or(0)
        };
        let numeric = |i: usize| {
            self.rows
                .iter()
                .all(|r| r[i] == NONE || r[i].starts_with(|c: char| c.is_ascii_digit()))
        };
        let layout: Vec<(usize, bool)> = (0..self.columns.len())
            .map(|i| (width(i), numeric(i)))
            .collect();
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (cell, &(w, right)) in cells.iter().zip(&layout) {
                let pad = " ".repeat(w - cell.chars().count());
                let _ = if right {
                    write!(out, "{pad}{cell}  ")
                } else {
                    write!(out, "{cell}{pad}  ")
                };
            }
            out.trim_end().to_string()
        };
        let mut out = format!("{}\n{}\n", self.title, line(&self.columns));
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// The table as HTML: caption, header row, one row per row.
    pub fn html(&self) -> String {
        let mut out = format!(
            "<table data-table=\"{}\"><caption>{}</caption><thead><tr>",
            escape(&self.title),
            escape(&self.title)
        );
        for column in &self.columns {
            let _ = write!(out, "<th>{}</th>", escape(column));
        }
        out.push_str("</tr></thead><tbody>");
        for row in &self.rows {
            out.push_str("<tr>");
            for cell in row {
                let _ = write!(out, "<td>{}</td>", escape(cell));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
        out
    }
}

/// `s` as HTML text or attribute value.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A figure as a cell: whole numbers from 100 up, with thousands
/// separated by commas; two decimals below.
pub fn figure(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.abs() < 100.0 {
        return format!("{v:.2}");
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_a_person_writes_them() {
        assert_eq!(figure(0.5), "0.50");
        assert_eq!(figure(99.994), "99.99");
        assert_eq!(figure(100.0), "100");
        assert_eq!(figure(1234.6), "1,235");
        assert_eq!(figure(1_234_567.0), "1,234,567");
        assert_eq!(figure(-4321.0), "-4,321");
    }

    #[test]
    fn text_and_html_carry_the_same_cells() {
        let mut t = Table::new("Results <all>", &["scenario", "value"]);
        t.push(vec!["reads, 10 big-Vs".into(), "4,101".into()]);
        t.push(vec!["a & b".into(), NONE.into()]);
        let text = t.text();
        assert_eq!(
            text,
            "Results <all>\nscenario          value\nreads, 10 big-Vs  4,101\na & b                 -\n"
        );
        let html = t.html();
        assert!(html.contains("<caption>Results &lt;all&gt;</caption>"));
        assert!(html.contains("<tr><td>a &amp; b</td><td>-</td></tr>"));
    }
}
