//! A small matcher for subgraphs, shared by the pattern passes.
//!
//! A [`Pattern`] tests a node's operation and, optionally, its operands in order; matching
//! binds names to the nodes it meets, so a pass reads the parts of what it matched by name:
//!
//! ```
//! use popcorn_dsl::ir::{LibOp, Op};
//! use popcorn_dsl::ops::Builtin;
//! use popcorn_dsl::passes::pattern::{any, op};
//!
//! // M * selection(labels, k)^T, as select leaves it (an SpMM with the sparse operand
//! // transposed on the right).
//! let pattern = op(|o| matches!(o, Op::Library(LibOp::SpMM { sparse_left: false, .. })))
//!     .args([
//!         any().bind("M"),
//!         op(|o| matches!(o, Op::Builtin(Builtin::Selection(_))))
//!             .bind("V")
//!             .args([any().bind("labels")]),
//!     ]);
//! # let _ = pattern;
//! ```
//!
//! [`same`] matches the node already bound to a name (`X * X^T`), and [`Pattern::when`] adds a
//! test of the node in its graph (its type, its users).

use crate::ir::{Graph, NodeId, Op};

/// What a pattern requires of a node.
enum Test {
    /// Any node.
    Any,
    /// A node whose operation passes the test.
    Op(fn(&Op) -> bool),
    /// The node bound to this name earlier in the match.
    Same(&'static str),
}

/// A pattern over a node and its operands.
pub struct Pattern {
    test: Test,
    operands: Option<Vec<Pattern>>,
    bind: Option<&'static str>,
    when: Vec<fn(&Graph, NodeId) -> bool>,
}

/// Matches any node.
pub fn any() -> Pattern {
    Pattern::new(Test::Any)
}

/// Matches a node whose operation passes `test`.
pub fn op(test: fn(&Op) -> bool) -> Pattern {
    Pattern::new(Test::Op(test))
}

/// Matches the node bound to `name` earlier in the same match.
pub fn same(name: &'static str) -> Pattern {
    Pattern::new(Test::Same(name))
}

/// The nodes a match bound, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    bound: Vec<(&'static str, NodeId)>,
}

impl Match {
    /// The node bound to `name`, if the pattern binds it.
    pub fn get(&self, name: &str) -> Option<NodeId> {
        self.bound
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, id)| *id)
    }
}

impl std::ops::Index<&str> for Match {
    type Output = NodeId;

    /// The node bound to `name`; the pattern must bind it (a pass bug otherwise).
    fn index(&self, name: &str) -> &NodeId {
        match self.bound.iter().find(|(n, _)| *n == name) {
            Some((_, id)) => id,
            None => panic!("the pattern binds no node named `{name}`"),
        }
    }
}

impl Pattern {
    fn new(test: Test) -> Pattern {
        Pattern {
            test,
            operands: None,
            bind: None,
            when: Vec::new(),
        }
    }

    /// Requires exactly these operands, in order.
    pub fn args<const N: usize>(mut self, operands: [Pattern; N]) -> Pattern {
        self.operands = Some(operands.into());
        self
    }

    /// Binds the matched node to `name`.
    pub fn bind(mut self, name: &'static str) -> Pattern {
        self.bind = Some(name);
        self
    }

    /// Also requires `test` of the node in its graph.
    pub fn when(mut self, test: fn(&Graph, NodeId) -> bool) -> Pattern {
        self.when.push(test);
        self
    }

    /// Matches the pattern at node `n`.
    pub fn matches(&self, g: &Graph, n: NodeId) -> Option<Match> {
        let mut m = Match::default();
        self.match_into(g, n, &mut m).then_some(m)
    }

    fn match_into(&self, g: &Graph, n: NodeId, m: &mut Match) -> bool {
        let node_ok = match &self.test {
            Test::Any => true,
            Test::Op(test) => test(&g.node(n).op),
            Test::Same(name) => m.get(name) == Some(n),
        };
        if !node_ok || !self.when.iter().all(|w| w(g, n)) {
            return false;
        }
        if let Some(name) = self.bind {
            match m.get(name) {
                Some(other) if other != n => return false,
                Some(_) => {}
                None => m.bound.push((name, n)),
            }
        }
        let Some(operands) = &self.operands else {
            return true;
        };
        let actual = g.operands(n);
        actual.len() == operands.len()
            && operands
                .iter()
                .zip(actual)
                .all(|(p, o)| p.match_into(g, o, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Op;
    use crate::Program;

    fn graph(src: &str) -> Graph {
        let mut g = Program::parse(src).unwrap().graph;
        g.remove_dead();
        g
    }

    #[test]
    fn binds_operands_and_sees_shared_nodes() {
        let g = graph("fn f(X: Dense[n, d], Y: Dense[n, d]) -> (A: Dense[n, n], B: Dense[n, n]) { A = X * X^T; B = X * Y^T; }");
        let gram = op(|o| matches!(o, Op::MatMul)).args([
            any().bind("X"),
            op(|o| matches!(o, Op::Transpose)).args([same("X")]),
        ]);
        let (a, b) = (g.outputs[0].1, g.outputs[1].1);
        let m = gram.matches(&g, a).expect("X * X^T matches");
        assert!(matches!(&g.node(m["X"]).op, Op::Input { param } if param == "X"));
        assert!(gram.matches(&g, b).is_none(), "X * Y^T is no Gram matrix");
    }

    #[test]
    fn tests_and_arity_must_hold() {
        let g = graph("fn f(x: Col[n]) -> (y: Col[n]) { y = exp(x) + 1; }");
        let y = g.outputs[0].1;
        let is_col = |g: &Graph, n: NodeId| g.node(n).ty.is_col();
        let p = op(|o| matches!(o, Op::Binary(_))).args([any().bind("e").when(is_col), any()]);
        assert!(p.matches(&g, y).is_some());
        let one_operand = op(|o| matches!(o, Op::Binary(_))).args([any()]);
        assert!(one_operand.matches(&g, y).is_none());
        let never = any().when(|_, _| false);
        assert!(never.matches(&g, y).is_none());
        assert_eq!(p.matches(&g, y).unwrap().get("nothing"), None);
    }
}
