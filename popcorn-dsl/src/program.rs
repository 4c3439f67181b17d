//! A checked program: its signature and typed graph. Built by the proc-macro at compile time
//! (from the same tokens) or by [`Program::parse`] at run time.

use crate::ir::Graph;
use crate::types::{Dim, Storage, Type};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A parameter or output of a program: its name and declared type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamSig {
    /// The name.
    pub name: String,
    /// The declared type.
    pub ty: Type,
}

/// A checked program.
#[derive(Clone, Debug)]
pub struct Program {
    /// Its name.
    pub name: String,
    /// Inputs, in signature order (tensors and scalars).
    pub params: Vec<ParamSig>,
    /// Outputs, in signature order.
    pub outputs: Vec<ParamSig>,
    /// The typed graph (symbolic dimensions).
    pub graph: Graph,
    /// Dimensions introduced in the body rather than the signature (the `k` of
    /// `selection(labels, k)` when no parameter has it).
    pub body_dims: BTreeSet<String>,
    /// The source text it was parsed from (the whole module).
    pub source: String,
    /// A hash of the name and source, computed once: the program's identity in plan caches.
    pub fingerprint: u64,
}

impl Program {
    /// The identity of a program named `name` parsed from `source` (a stable FNV-1a hash).
    pub fn fingerprint_of(name: &str, source: &str) -> u64 {
        let mut bytes = Vec::with_capacity(name.len() + 1 + source.len());
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(source.as_bytes());
        kernel_ir::fnv1a64(&bytes)
    }

    /// Every symbolic dimension of the program, sorted.
    pub fn dims(&self) -> BTreeSet<String> {
        let mut out = self.body_dims.clone();
        for p in self.params.iter().chain(&self.outputs) {
            for d in [&p.ty.shape.rows, &p.ty.shape.cols] {
                if let Dim::Sym(s) = d {
                    out.insert(s.clone());
                }
            }
        }
        out
    }

    /// Dimensions that the inputs' shapes do not determine (they must be given when calling,
    /// such as `k` in a program whose only cluster-related input is `labels: Index[n]`).
    pub fn free_dims(&self) -> BTreeSet<String> {
        let mut bound = BTreeSet::new();
        for p in self
            .params
            .iter()
            .filter(|p| p.ty.storage != Storage::Scalar)
        {
            for d in [&p.ty.shape.rows, &p.ty.shape.cols] {
                if let Dim::Sym(s) = d {
                    bound.insert(s.clone());
                }
            }
        }
        self.dims().difference(&bound).cloned().collect()
    }

    /// The declared type of a parameter.
    pub fn param(&self, name: &str) -> Option<&ParamSig> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The signature as written: `fn name(K: Dense[n, n], ...) -> (D: Dense[n, k])`.
    pub fn signature(&self) -> String {
        let list = |v: &[ParamSig]| {
            v.iter()
                .map(|p| format!("{}: {}", p.name, p.ty))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "fn {}({}) -> ({})",
            self.name,
            list(&self.params),
            list(&self.outputs)
        )
    }
}
