//! Delimited text reader (CSV, TSV, whitespace-separated columns).
//!
//! Rules:
//! - Blank lines and lines whose first non-blank character is `#` are skipped (line numbers in
//!   errors still count them).
//! - Fields are trimmed of surrounding whitespace and of one pair of surrounding double quotes.
//!   Quoted separators inside a field are not supported (numeric data never needs them).
//! - The separator is detected from the first non-skipped line ([`Separator::Auto`]): the most
//!   frequent of `,` `;` and tab (ties prefer `,` then `;`); when none occurs, runs of spaces
//!   split the fields if the line has any, else the file has one column.
//! - A header is detected ([`Header::Auto`]) when some field of the first non-skipped line is
//!   not a number. A first data row with a typo would therefore be taken as a header; force
//!   [`Header::Absent`] to get an error for it instead.
//! - Every row must have as many fields as the header (or the first data row).
//! - Values must be finite numbers; labels must be integers or floats with integral values.

use std::path::Path;

use super::dataset::Dataset;
use super::error::IoError;
use super::input::open_input;
use super::text::{parse_label, parse_value, LineReader};

/// Which column of a CSV file holds the true labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabelColumn {
    /// Decided from the header: [`LabelColumn::First`] when the first column's name is a label
    /// name, else [`LabelColumn::Last`] when the last column's name contains `label`, `class`
    /// or `target`, else no labels. Without a header there are no labels.
    ///
    /// A label name, compared case-insensitively after trimming, is exactly `y`, or contains
    /// `label`, `class` or `target` (so `Label`, `true_labels`, `class_id`, `TARGET` match;
    /// `x`, `feature_1`, `yield` do not). A last column named `y` is a feature, as in the
    /// common `x,y` header of 2-D points.
    #[default]
    Auto,
    /// The first column holds the labels.
    First,
    /// The last column holds the labels.
    Last,
    /// No labels: every column is a feature.
    None,
}

/// How the fields of a line are separated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Separator {
    /// Detected from the first line (see the module documentation).
    #[default]
    Auto,
    /// `,`
    Comma,
    /// `;`
    Semicolon,
    /// A tab character.
    Tab,
    /// Runs of spaces and tabs.
    Whitespace,
}

/// Whether the first line is a header of column names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Header {
    /// A header when some field of the first line is not a number.
    #[default]
    Auto,
    /// The first line is a header.
    Present,
    /// The first line is data.
    Absent,
}

/// Options of the CSV reader; the default detects everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CsvOptions {
    /// Which column holds the labels.
    pub label_column: LabelColumn,
    /// How fields are separated.
    pub separator: Separator,
    /// Whether there is a header line.
    pub header: Header,
}

/// Loads a delimited text file (gzip-compressed or not) as a point set.
///
/// Each data row is a point; with a label column, that column's integers become
/// [`Dataset::labels`] and the other columns the features.
pub fn load_csv(path: impl AsRef<Path>, options: &CsvOptions) -> Result<Dataset, IoError> {
    let path = path.as_ref();
    let mut lines = LineReader::new(open_input(path)?, path);
    let empty = |problem: String| IoError::Empty {
        path: path.to_path_buf(),
        problem,
    };

    // The first content line fixes the separator, the header, the width and the label column;
    // when it is data, it is also the first row.
    let mut rows: Option<Rows> = None;
    while let Some((line_no, text)) = lines.next_line()? {
        if is_skipped(text) {
            continue;
        }
        match rows.as_mut() {
            Some(rows) => rows.push(text, line_no, path)?,
            None => {
                let (layout, is_header) = Layout::from_first_line(text, line_no, options);
                if layout.d() == 0 {
                    return Err(empty(format!(
                        "line {line_no} has a single column and it is the label column, so \
                         there are no features; set the label column to None"
                    )));
                }
                let mut first_rows = Rows::new(layout);
                if !is_header {
                    first_rows.push(text, line_no, path)?;
                }
                rows = Some(first_rows);
            }
        }
    }
    let Some(rows) = rows else {
        return Err(empty("the file has no data rows".to_string()));
    };
    if rows.n == 0 {
        return Err(empty(format!(
            "no data rows after the header on line {}",
            rows.layout.reference_line
        )));
    }
    Ok(Dataset {
        n: rows.n,
        d: rows.layout.d(),
        x: rows.x,
        labels: rows.layout.label_index.map(|_| rows.labels),
        source: path.to_path_buf(),
    })
}

/// What the first content line decided about every row.
struct Layout {
    separator: Separator,
    /// Fields per line.
    width: usize,
    /// 0-based field index of the labels, if any.
    label_index: Option<usize>,
    /// The line `width` was taken from (header or first data row).
    reference_line: usize,
}

impl Layout {
    /// Reads the layout off the first content line; also says whether that line is a header.
    fn from_first_line(text: &str, line_no: usize, options: &CsvOptions) -> (Self, bool) {
        let separator = match options.separator {
            Separator::Auto => detect_separator(text),
            chosen => chosen,
        };
        let is_header = match options.header {
            Header::Auto => fields(text, separator).any(|f| f.parse::<f64>().is_err()),
            Header::Present => true,
            Header::Absent => false,
        };
        let width = fields(text, separator).count();
        let label_column = match options.label_column {
            LabelColumn::Auto if is_header => auto_label_column(text, separator),
            LabelColumn::Auto => LabelColumn::None,
            chosen => chosen,
        };
        let label_index = match label_column {
            LabelColumn::First => Some(0),
            LabelColumn::Last => Some(width.saturating_sub(1)),
            LabelColumn::Auto | LabelColumn::None => None,
        };
        let layout = Self {
            separator,
            width,
            label_index,
            reference_line: line_no,
        };
        (layout, is_header)
    }

    /// Number of feature columns.
    fn d(&self) -> usize {
        self.width - usize::from(self.label_index.is_some())
    }
}

/// The rows parsed so far.
struct Rows {
    layout: Layout,
    n: usize,
    x: Vec<f64>,
    labels: Vec<i64>,
}

impl Rows {
    fn new(layout: Layout) -> Self {
        Self {
            layout,
            n: 0,
            x: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// Parses one data line into the point set.
    fn push(&mut self, text: &str, line_no: usize, path: &Path) -> Result<(), IoError> {
        let layout = &self.layout;
        let (x_len, labels_len) = (self.x.len(), self.labels.len());
        // One pass parses and counts; a row of the wrong width is reported as ragged even when
        // one of its fields also fails to parse, since the width is the more basic problem.
        let mut found = 0;
        let mut parsed = Ok(());
        for (index, field) in fields(text, layout.separator).enumerate() {
            found = index + 1;
            let result = if Some(index) == layout.label_index {
                parse_label(field, path, line_no, index + 1).map(|label| self.labels.push(label))
            } else {
                parse_value(field, path, line_no, index + 1).map(|value| self.x.push(value))
            };
            if let Err(e) = result {
                found = fields(text, layout.separator).count();
                parsed = Err(e);
                break;
            }
        }
        if found != layout.width {
            self.x.truncate(x_len);
            self.labels.truncate(labels_len);
            return Err(IoError::Ragged {
                path: path.to_path_buf(),
                line: line_no,
                found,
                expected: layout.width,
                reference_line: layout.reference_line,
            });
        }
        parsed?;
        self.n += 1;
        Ok(())
    }
}

/// Whether a line carries no data (blank or a `#` comment).
fn is_skipped(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.is_empty() || trimmed.starts_with('#')
}

/// The separator a first line most likely uses.
fn detect_separator(text: &str) -> Separator {
    let count = |c: char| text.matches(c).count();
    let (commas, semicolons, tabs) = (count(','), count(';'), count('\t'));
    if commas == 0 && semicolons == 0 && tabs == 0 {
        return if text.trim().contains([' ', '\t']) {
            Separator::Whitespace
        } else {
            Separator::Comma
        };
    }
    if commas >= semicolons && commas >= tabs {
        Separator::Comma
    } else if semicolons >= tabs {
        Separator::Semicolon
    } else {
        Separator::Tab
    }
}

/// The trimmed, unquoted fields of a line.
fn fields(text: &str, separator: Separator) -> Fields<'_> {
    let byte = match separator {
        Separator::Whitespace => return Fields::Whitespace(text.split_ascii_whitespace()),
        Separator::Comma | Separator::Auto => b',',
        Separator::Semicolon => b';',
        Separator::Tab => b'\t',
    };
    Fields::Split {
        text,
        start: Some(0),
        byte,
    }
}

/// Iterator over the cleaned fields of one line (no allocation).
enum Fields<'a> {
    /// Split at an ASCII separator byte; `start` is `None` after the last field.
    Split {
        text: &'a str,
        start: Option<usize>,
        byte: u8,
    },
    Whitespace(std::str::SplitAsciiWhitespace<'a>),
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        match self {
            Fields::Split { text, start, byte } => {
                let from = (*start)?;
                let rest = text.get(from..)?;
                // The separator is ASCII, so every split point is a char boundary.
                match rest.bytes().position(|b| b == *byte) {
                    Some(len) => {
                        *start = Some(from + len + 1);
                        rest.get(..len).map(clean_field)
                    }
                    None => {
                        *start = None;
                        Some(clean_field(rest))
                    }
                }
            }
            Fields::Whitespace(split) => split.next().map(clean_field),
        }
    }
}

/// Trims ASCII whitespace and one pair of surrounding double quotes.
fn clean_field(field: &str) -> &str {
    let field = field.trim_ascii();
    field
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .map(str::trim_ascii)
        .unwrap_or(field)
}

/// [`LabelColumn::Auto`] resolved from a header line.
fn auto_label_column(header: &str, separator: Separator) -> LabelColumn {
    let mut names = fields(header, separator);
    let first = names.next();
    let last = names.last();
    if first.is_some_and(is_label_name) {
        LabelColumn::First
    } else if last.is_some_and(|name| is_label_name(name) && !is_y(name)) {
        LabelColumn::Last
    } else {
        LabelColumn::None
    }
}

/// Whether a column name denotes labels (see [`LabelColumn::Auto`]).
fn is_label_name(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    is_y(name) || lower.contains("label") || lower.contains("class") || lower.contains("target")
}

/// Whether a column name is `y` (a label when first, a coordinate in `x,y` when last).
fn is_y(name: &str) -> bool {
    name.trim().eq_ignore_ascii_case("y")
}
