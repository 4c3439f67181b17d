//! Edge list reader: an undirected graph, one edge `i j [w]` a line, into its symmetric
//! adjacency matrix ([`CsrMatrix`]).
//!
//! Rules:
//! - Fields are separated by spaces, tabs or commas; everything after `#` or `%` is a comment;
//!   blank lines are skipped (line numbers in errors still count them).
//! - `i` and `j` are node indices, 0-based or 1-based as the caller says ([`IndexBase`]);
//!   the weight `w` is optional (1 when absent), finite and `>= 0`.
//! - Each line is an undirected edge: the matrix holds `w` at `(i, j)` and at `(j, i)` (a
//!   self-loop `i i w` once, on the diagonal). A pair listed more than once, in either
//!   direction (files that list both directions), counts once and must carry the same weight
//!   every time; different weights are an error naming both lines.
//! - The number of nodes is the largest index plus one (less the base).

use std::collections::HashMap;
use std::path::Path;

use super::error::{shorten, IoError};
use super::input::open_input;
use super::mtx::from_triplets;
use super::sparse::CsrMatrix;
use super::text::{parse_value, LineReader};

/// Whether an edge list numbers its nodes from 0 or from 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IndexBase {
    /// The first node is 0 (the default; networkx's `write_edgelist` of integer nodes).
    #[default]
    Zero,
    /// The first node is 1 (SNAP files of 1-based ids, Matlab).
    One,
}

impl IndexBase {
    /// 0 or 1.
    pub fn offset(self) -> usize {
        match self {
            IndexBase::Zero => 0,
            IndexBase::One => 1,
        }
    }
}

/// Loads an edge list (gzip-compressed or not) as the symmetric adjacency matrix of its
/// undirected graph; see the module's rules.
///
/// # Errors
/// [`IoError::Graph`] naming the line for a line that is not `i j [w]`, an index below the
/// base, a negative weight or an edge repeated with another weight; [`IoError::Empty`] when
/// the file has no edge; [`IoError::NonFinite`] / [`IoError::NotANumber`] for weights.
pub fn load_edge_list(path: impl AsRef<Path>, base: IndexBase) -> Result<CsrMatrix, IoError> {
    let path = path.as_ref();
    let mut lines = LineReader::new(open_input(path)?, path);
    // The unordered pair (low, high) -> (weight, line first seen).
    let mut edges: HashMap<(usize, usize), (f64, usize)> = HashMap::new();
    let mut nodes = 0usize;
    while let Some((line_no, text)) = lines.next_line()? {
        let content = text.split(['#', '%']).next().unwrap_or("");
        let tokens: Vec<&str> = content
            .split(|c: char| c.is_ascii_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .collect();
        if tokens.is_empty() {
            continue;
        }
        let error = |problem: String| IoError::Graph {
            path: path.to_path_buf(),
            line: line_no,
            problem,
        };
        if tokens.len() > 3 || tokens.len() < 2 {
            return Err(error(format!(
                "`{}` has {} fields; an edge is `i j` or `i j weight`",
                shorten(content.trim()),
                tokens.len()
            )));
        }
        let node = |t: &str| -> Result<usize, IoError> {
            let i: usize = t.parse().map_err(|_| {
                error(format!(
                    "`{}` is not a node index (a non-negative integer)",
                    shorten(t)
                ))
            })?;
            i.checked_sub(base.offset()).ok_or_else(|| {
                error(format!(
                    "node index {i} with 1-based indices; the first node is 1 (or read the \
                     file as 0-based)"
                ))
            })
        };
        let (i, j) = (node(tokens[0])?, node(tokens[1])?);
        let w = match tokens.get(2) {
            Some(t) => parse_value(t, path, line_no, 3)?,
            None => 1.0,
        };
        if w < 0.0 {
            return Err(error(format!(
                "the weight {w} of edge ({}, {}) is negative; edge weights must be >= 0",
                tokens[0], tokens[1]
            )));
        }
        nodes = nodes.max(i.max(j) + 1);
        let key = (i.min(j), i.max(j));
        match edges.get(&key) {
            Some(&(seen, first)) if seen != w => {
                return Err(error(format!(
                    "edge ({}, {}) has weight {w} here and {seen} on line {first}; an edge \
                     listed twice must carry the same weight",
                    tokens[0], tokens[1]
                )))
            }
            Some(_) => {}
            None => {
                edges.insert(key, (w, line_no));
            }
        }
    }
    if edges.is_empty() {
        return Err(IoError::Empty {
            path: path.to_path_buf(),
            problem: "no edges; an edge list has one `i j [weight]` line per edge".into(),
        });
    }
    let mut triplets = Vec::with_capacity(2 * edges.len());
    for (&(i, j), &(w, _)) in &edges {
        triplets.push((i, j, w));
        if i != j {
            triplets.push((j, i, w));
        }
    }
    from_triplets(nodes, nodes, triplets)
}
