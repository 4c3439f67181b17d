//! The planned graph in Graphviz DOT, fused groups drawn as clusters.

use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// A node of the drawn graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewNode {
    /// Label: operation and type.
    pub label: String,
    /// The plan step that computes it, if any (inputs and host scalars have none).
    pub step: Option<usize>,
    /// Drawing style: `input`, `scalar`, `library`, `fused`, `builtin`, `output`.
    pub style: String,
}

/// The planned graph: nodes, operand edges, and step labels for clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphView {
    /// Nodes.
    pub nodes: Vec<ViewNode>,
    /// Edges `(operand, user)` as indices into `nodes`.
    pub edges: Vec<(usize, usize)>,
    /// A label per plan step (cluster titles).
    pub steps: Vec<String>,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

impl GraphView {
    /// Renders DOT: one cluster per plan step that computes several nodes (a fused kernel).
    pub fn to_dot(&self, title: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph \"{}\" {{", escape(title));
        let _ = writeln!(
            out,
            "  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];"
        );
        let style = |s: &str| match s {
            "input" => "shape=box, style=filled, fillcolor=\"#dde8f7\"",
            "scalar" => "shape=plaintext",
            "library" => "shape=box, style=\"filled,bold\", fillcolor=\"#f7e3c8\"",
            "fused" => "shape=ellipse, style=filled, fillcolor=\"#d9f2d9\"",
            "output" => "shape=doubleoctagon",
            _ => "shape=box",
        };
        for (si, label) in self.steps.iter().enumerate() {
            let members: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].step == Some(si))
                .collect();
            if members.len() > 1 {
                let _ = writeln!(out, "  subgraph cluster_{si} {{");
                let _ = writeln!(
                    out,
                    "    label=\"step {si}: {}\"; style=rounded; color=\"#4a9a4a\";",
                    escape(label)
                );
                for i in members {
                    let n = &self.nodes[i];
                    let _ = writeln!(
                        out,
                        "    n{i} [label=\"{}\", {}];",
                        escape(&n.label),
                        style(&n.style)
                    );
                }
                let _ = writeln!(out, "  }}");
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let clustered = n
                .step
                .is_some_and(|s| self.nodes.iter().filter(|m| m.step == Some(s)).count() > 1);
            if !clustered {
                let label = match n.step {
                    Some(s) => format!("{}\\n(step {s})", escape(&n.label)),
                    None => escape(&n.label),
                };
                let _ = writeln!(out, "  n{i} [label=\"{label}\", {}];", style(&n.style));
            }
        }
        for (a, b) in &self.edges {
            let _ = writeln!(out, "  n{a} -> n{b};");
        }
        out.push_str("}\n");
        out
    }
}

impl super::Plan {
    /// The planned graph in DOT, fused groups as clusters.
    pub fn to_dot(&self) -> String {
        self.graph.to_dot(&self.program)
    }
}
