//! Text helpers shared by the reports: aligned tables, word wrapping and compact numbers. Pure: data in,
//! `String` out.

use std::collections::BTreeMap;

use scheduler_core::model::Resources;
use scheduler_core::model::resources::{GPU, MEMORY, PODS, ResourceNames, format_bytes};

/// Column alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// A column: header and alignment.
#[derive(Clone, Debug)]
pub struct Column {
    /// Header text.
    pub header: &'static str,
    /// Alignment of the cells (and the header).
    pub align: Align,
}

impl Column {
    /// A left-aligned column.
    #[must_use]
    pub fn left(header: &'static str) -> Self {
        Self {
            header,
            align: Align::Left,
        }
    }

    /// A right-aligned column.
    #[must_use]
    pub fn right(header: &'static str) -> Self {
        Self {
            header,
            align: Align::Right,
        }
    }
}

/// Columns that share a heading printed on a line above theirs (`GPU`, `CPU`, ...).
#[derive(Clone, Debug)]
pub struct Group {
    /// Heading; empty for columns without one.
    pub title: &'static str,
    /// The columns.
    pub columns: Vec<Column>,
}

/// Renders a table: columns separated by one space inside a group and two between groups, every
/// column as wide as its widest cell. Trailing spaces are trimmed. Rows must have one cell per column.
#[must_use]
pub fn table(groups: &[Group], rows: &[Vec<String>]) -> String {
    let columns: Vec<&Column> = groups.iter().flat_map(|g| g.columns.iter()).collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Gap before each column: none for the first, two at a group boundary, one inside a group.
    let mut gaps = Vec::with_capacity(columns.len());
    for (gi, g) in groups.iter().enumerate() {
        for ci in 0..g.columns.len() {
            gaps.push(match (gi, ci) {
                (0, 0) => 0,
                (_, 0) => 2,
                _ => 1,
            });
        }
    }
    let mut out = String::new();
    if groups.iter().any(|g| !g.title.is_empty()) {
        let mut line = String::new();
        let mut col = 0;
        for g in groups {
            let span: usize = (col..col + g.columns.len())
                .map(|i| widths[i] + gaps[i])
                .sum::<usize>()
                - gaps[col];
            line.push_str(&" ".repeat(gaps[col]));
            line.push_str(&pad(g.title, span, Align::Left));
            col += g.columns.len();
        }
        push_line(&mut out, &line);
    }
    let cells = |row: Vec<&str>| -> String {
        let mut line = String::new();
        for (i, (cell, c)) in row.iter().zip(&columns).enumerate() {
            line.push_str(&" ".repeat(gaps[i]));
            line.push_str(&pad(cell, widths[i], c.align));
        }
        line
    };
    push_line(&mut out, &cells(columns.iter().map(|c| c.header).collect()));
    for row in rows {
        push_line(&mut out, &cells(row.iter().map(String::as_str).collect()));
    }
    out
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line.trim_end());
    out.push('\n');
}

fn pad(text: &str, width: usize, align: Align) -> String {
    let fill = " ".repeat(width.saturating_sub(text.chars().count()));
    match align {
        Align::Left => format!("{text}{fill}"),
        Align::Right => format!("{fill}{text}"),
    }
}

/// Wraps `text` to `width` columns: the first line starts with `first` (a label), the others with
/// `indent` spaces. Words longer than a line are kept whole.
#[must_use]
pub fn wrap(first: &str, indent: usize, text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_owned();
    let mut line_has_word = false;
    for word in text.split_whitespace() {
        let len = line.chars().count();
        if line_has_word && len + 1 + word.chars().count() > width {
            push_line(&mut out, &line);
            line = " ".repeat(indent);
            line_has_word = false;
        }
        if line_has_word {
            line.push(' ');
        }
        line.push_str(word);
        line_has_word = true;
    }
    push_line(&mut out, &line);
    out
}

/// A number with at most two decimals and no trailing zeros: `2`, `0.5`, `1.25`, `-1`.
#[must_use]
pub fn num(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_owned() } else { s.to_owned() }
}

/// Bytes in decimal units with one decimal at most: `68.7G`, `512M`, `0`.
#[must_use]
pub fn bytes(b: f64) -> String {
    for (unit, scale) in [("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)] {
        if b.abs() >= scale {
            let v = format!("{:.1}", b / scale);
            return format!("{}{unit}", v.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    num(b)
}

/// Bytes in binary units with one decimal at most: `32Gi`, `1.5Gi`, `512Mi`, `0`.
#[must_use]
pub fn binary_bytes(b: f64) -> String {
    for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let scale = f64::from(1u32 << (shift - 10)) * 1024.0;
        if b.abs() >= scale {
            let v = format!("{:.1}", b / scale);
            return format!("{}{unit}", v.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    num(b)
}

/// A model amount (milli-GPUs, millicores, bytes) in the Queue spec's units: GPU devices, CPU
/// millicores, memory megabytes (10^6 bytes), other resources as they are.
#[must_use]
pub fn spec_units(slot: usize, raw: i64) -> f64 {
    let v = raw as f64;
    match slot {
        GPU => v / 1000.0,
        MEMORY => v / 1e6,
        _ => v,
    }
}

/// A Queue spec amount back in model units.
#[must_use]
pub fn spec_to_raw(slot: usize, v: f64) -> i64 {
    let raw = match slot {
        GPU => v * 1000.0,
        MEMORY => v * 1e6,
        _ => v,
    };
    // Saturating conversion is the intent for absurd values.
    raw.round() as i64
}

/// A model amount for text: Kubernetes notation (`2`, `0.5`, `500m`); memory in whole Mi/Gi/Ti when it
/// is one (`8Gi`), else in decimal units (`64G`, as queue quotas are written in MB).
#[must_use]
pub fn amount(names: &ResourceNames, slot: usize, raw: i64) -> String {
    if slot == MEMORY {
        return if raw != 0 && raw % (1 << 20) == 0 {
            format_bytes(raw)
        } else {
            bytes(raw as f64)
        };
    }
    names.format_amount(slot, raw)
}

/// A Queue spec amount of the named resource for text (see [`amount`]); `-` for -1 (unlimited/none).
#[must_use]
pub fn spec_text(resource: &str, v: f64) -> String {
    if v < 0.0 {
        return "-".to_owned();
    }
    let names = ResourceNames::default();
    match names.get(resource) {
        Some(slot) => amount(&names, slot, spec_to_raw(slot, v)),
        None => num(v),
    }
}

/// A resource vector as `name -> amount` in Kubernetes notation (`8`, `500m`, `8Gi`), zeros and the pod
/// slot left out: the JSON form of amounts.
#[must_use]
pub fn amounts(names: &ResourceNames, r: &Resources) -> BTreeMap<String, String> {
    r.nonzero()
        .filter(|(slot, _)| *slot != PODS)
        .map(|(slot, v)| (names.name(slot).to_owned(), names.format_amount(slot, v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_group() {
        let groups = [
            Group {
                title: "",
                columns: vec![Column::left("NAME"), Column::right("N")],
            },
            Group {
                title: "GPU",
                columns: vec![Column::right("USED"), Column::right("FREE")],
            },
        ];
        let rows = vec![
            vec!["a".to_owned(), "10".to_owned(), "1".to_owned(), "-".to_owned()],
            vec![
                "long-name".to_owned(),
                "2".to_owned(),
                "0.5".to_owned(),
                "12".to_owned(),
            ],
        ];
        assert_eq!(
            table(&groups, &rows),
            "              GPU\n\
             NAME       N  USED FREE\n\
             a         10     1    -\n\
             long-name  2   0.5   12\n"
        );
    }

    #[test]
    fn wrapping_keeps_a_hanging_indent() {
        assert_eq!(
            wrap("  Why: ", 7, "one two three four five six", 19),
            "  Why: one two\n       three four\n       five six\n"
        );
        assert_eq!(
            wrap("x: ", 3, "averyveryverylongword", 10),
            "x: averyveryverylongword\n"
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(num(2.0), "2");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(1.256), "1.26");
        assert_eq!(num(-1.0), "-1");
        assert_eq!(num(-0.001), "0");
        assert_eq!(bytes(68_719_476_736.0), "68.7G");
        assert_eq!(bytes(512e6), "512M");
        assert_eq!(bytes(0.0), "0");
        assert_eq!(binary_bytes(32.0 * (1u64 << 30) as f64), "32Gi");
        assert_eq!(binary_bytes(1.5 * (1u64 << 30) as f64), "1.5Gi");
        assert_eq!(binary_bytes(2.0 * (1u64 << 40) as f64), "2Ti");
        assert_eq!(binary_bytes(512.0 * (1u64 << 20) as f64), "512Mi");
        let names = ResourceNames::default();
        let r = Resources::new(1500, 8 << 30, 2000).with(PODS, 1);
        let a = amounts(&names, &r);
        assert_eq!(a.get("cpu").map(String::as_str), Some("1500m"));
        assert_eq!(a.get("memory").map(String::as_str), Some("8Gi"));
        assert_eq!(a.get("nvidia.com/gpu").map(String::as_str), Some("2"));
        assert!(!a.contains_key("pods"));
        assert_eq!(amount(&names, MEMORY, 8 << 30), "8Gi");
        assert_eq!(amount(&names, MEMORY, 64_000_000_000), "64G");
        assert_eq!(amount(&names, MEMORY, 1536 << 20), "1536Mi");
        assert_eq!(amount(&names, MEMORY, 0), "0");
        assert_eq!(amount(&names, GPU, 1500), "1.5");
        assert_eq!(spec_units(MEMORY, 64_000_000_000), 64_000.0);
        assert_eq!(spec_to_raw(GPU, 2.5), 2500);
        assert_eq!(spec_text("memory", 64_000.0), "64G");
        assert_eq!(spec_text("cpu", 1500.0), "1500m");
        assert_eq!(spec_text("nvidia.com/gpu", -1.0), "-");
    }
}
