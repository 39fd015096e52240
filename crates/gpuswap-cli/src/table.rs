//! Text tables and text for the terminal: columns aligned under a header, or one record
//! per row when the terminal is narrower than the table; lines wrapped to its width.
//! Every command's tables (the reports, the listings, `gpuswap top`) are laid out here.

/// Narrowest output the tables are laid out for: below it, records wrap anyway.
const MIN_WIDTH: usize = 40;

/// How wide the terminal on standard output is (`COLUMNS` if set, as for other
/// command-line tools), or `None` when output goes to a pipe or a file: then tables keep
/// one row per line, whatever their width, for tools that read them.
pub fn terminal_width() -> Option<usize> {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return Some(columns);
    }
    terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
}

/// Lays out rows in left-aligned columns, two spaces apart, with a header rule; when
/// that is wider than `width`, as one record per row instead (the first cell as its
/// title, then one `header  value` line per other cell, long values wrapped).
pub fn table(header: &[&str], rows: &[Vec<String>], width: Option<usize>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    if let Some(width) = width.filter(|w| total > *w) {
        return records(header, rows, width.max(MIN_WIDTH));
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let text: Vec<String> = cells
            .zip(&widths)
            // Padded by hand: a `{:<w$}` width above 65535 panics in std's formatter.
            .map(|(c, w)| pad(c, *w))
            .collect();
        text.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out += &line(&mut rules.iter().map(String::as_str));
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `text` padded with spaces to `width` characters.
fn pad(text: &str, width: usize) -> String {
    format!(
        "{text}{}",
        " ".repeat(width.saturating_sub(text.chars().count()))
    )
}

/// The narrow layout of [`table`]: a record per row.
fn records(header: &[&str], rows: &[Vec<String>], width: usize) -> String {
    let label_width = header.iter().skip(1).map(|h| h.len()).max().unwrap_or(0);
    let indent = 2 + label_width + 2;
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let title = format!("{} {}", header[0], row.first().map_or("", String::as_str));
        out += &wrap(&title, width, 0);
        for (h, cell) in header.iter().zip(row).skip(1) {
            if cell.is_empty() {
                continue;
            }
            let first = format!("  {}  {cell}", pad(h, label_width));
            out += &wrap(&first, width, indent);
        }
    }
    out
}

/// A column of [`columns`]: its header, and the cell it shows for an item.
pub type Column<'a, T> = (&'a str, &'a dyn Fn(&T) -> String);

/// [`table`] with a row per item, given column by column: each header stands beside
/// the cell it heads.
pub fn columns<T>(items: &[T], columns: &[Column<'_, T>], width: Option<usize>) -> String {
    let header: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| columns.iter().map(|(_, cell)| cell(item)).collect())
        .collect();
    table(&header, &rows, width)
}

/// A table's caption: a blank line, then `text` wrapped to the terminal's `width`.
pub fn caption(text: &str, width: Option<usize>) -> String {
    format!("\n{}", wrap(text, width.unwrap_or(usize::MAX), 0))
}

/// Breaks `text` at spaces into lines of at most `width` characters (a word longer than
/// that gets a line of its own), continuation lines indented by `indent`.
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let body = text.trim_start_matches(' ');
    let lead = text.len() - body.len();
    let mut out = String::new();
    let mut line = " ".repeat(lead);
    // Whether the line holds a word yet (a line of indentation alone never wraps).
    let mut has_word = false;
    for word in body.split(' ') {
        let len = line.chars().count();
        if has_word && len + 1 + word.chars().count() > width {
            out += line.trim_end();
            out.push('\n');
            line = " ".repeat(indent);
        } else if has_word {
            line.push(' ');
        }
        line += word;
        has_word = true;
    }
    out += line.trim_end();
    out.push('\n');
    out
}

/// A line of `item  item  item` fields: as it is, or with the fields spread over lines
/// of at most `width` characters.
pub fn fields(items: &[String], width: Option<usize>) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for item in items.iter().filter(|i| !i.is_empty()) {
        let fits = width.is_none_or(|w| line.chars().count() + 2 + item.chars().count() <= w);
        if !line.is_empty() && !fits {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line += "  ";
        }
        line += item;
    }
    out += &line;
    out.push('\n');
    out
}

/// Text whose lines are `field  field  field`, each line spread over lines of at most
/// `width` characters if it is wider (see [`fields`]).
pub fn fit(text: &str, width: Option<usize>) -> String {
    text.lines()
        .map(|line| {
            let items: Vec<String> = line.split("  ").map(str::to_owned).collect();
            fields(&items, width)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec![
                "a".into(),
                "backprop".into(),
                "a long description of what it does".into(),
            ],
            vec!["b".into(), "hotspot".into(), String::new()],
        ]
    }

    #[test]
    fn a_table_wider_than_the_terminal_becomes_records() {
        let header = ["tenant", "app", "description"];
        let wide = table(&header, &rows(), None);
        assert_eq!(wide.lines().count(), 4);
        assert!(
            wide.lines()
                .next()
                .unwrap()
                .starts_with("tenant  app       description")
        );
        // Fits in 60 columns: unchanged.
        assert_eq!(table(&header, &rows(), Some(60)), wide);
        let narrow = table(&header, &rows(), Some(40));
        assert_eq!(
            narrow,
            "tenant a\n  app          backprop\n  description  a long description of\n               what it does\n\ntenant b\n  app          hotspot\n"
        );
        assert!(narrow.lines().all(|l| l.chars().count() <= 40));
    }

    #[test]
    fn columns_lay_out_the_table_of_their_cells() {
        let items = [("a", 1), ("b", 22)];
        let text = columns(
            &items,
            &[
                ("name", &|i| i.0.to_owned()),
                ("count", &|i| i.1.to_string()),
            ],
            None,
        );
        assert_eq!(
            text,
            table(
                &["name", "count"],
                &[vec!["a".into(), "1".into()], vec!["b".into(), "22".into()]],
                None
            )
        );
        assert_eq!(text, "name  count\n----  -----\na     1\nb     22\n");
    }

    #[test]
    fn fields_spread_over_lines_that_fit() {
        let items: Vec<String> = ["makespan 1 s", "STP 1.000", "ANTT 1.000"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            fields(&items, None),
            "makespan 1 s  STP 1.000  ANTT 1.000\n"
        );
        assert_eq!(
            fields(&items, Some(25)),
            "makespan 1 s  STP 1.000\nANTT 1.000\n"
        );
    }

    proptest::proptest! {
        /// Wrapped lines fit the width, unless one word alone is wider; no word is lost.
        #[test]
        fn wrapped_lines_fit_and_keep_every_word(
            words in proptest::collection::vec("[a-z]{1,12}", 1..40),
            width in 20usize..100,
            indent in 0usize..10,
        ) {
            let text = words.join(" ");
            let wrapped = wrap(&text, width, indent);
            for line in wrapped.lines() {
                let fits = line.chars().count() <= width;
                proptest::prop_assert!(fits || !line.trim().contains(' '), "{line:?}");
            }
            let back: Vec<&str> = wrapped.split_whitespace().collect();
            proptest::prop_assert_eq!(back, words.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    #[test]
    fn cells_wider_than_the_formatters_limit_are_laid_out() {
        // std's `{:<w$}` panics for widths above 65535.
        let wide = "x".repeat(70_000);
        let text = table(
            &["name", "app"],
            &[vec![wide.clone(), "a".into()], vec!["b".into(), "c".into()]],
            None,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], format!("{wide}  a"));
        assert_eq!(lines[3].len(), 70_000 + 3);
        assert!(lines[3].starts_with('b') && lines[3].ends_with("  c"));
    }
}
