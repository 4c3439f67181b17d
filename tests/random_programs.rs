//! Property test of the planner and the CPU backend: random well-typed programs over random
//! shapes run through the planned CPU path (f64 with and without fusion, and f32) and must
//! agree with the independent reference evaluator (`popcorn-runtime/src/reference.rs`).
//!
//! Programs are built from a list of choices (a "choice sequence"): proptest shrinks the list,
//! which removes statements, simplifies operations (choice 0 is the simplest) and drives every
//! dimension towards 1. A failure prints the program's source, its dimensions and the seed of
//! its inputs.
//!
//! Numerical hygiene, so that a mismatch means a bug rather than rounding:
//! - inputs are f32-representable, so f32 and f64 runs start from the same values;
//! - denominators are `abs(y) + 1`, `exp` only sees bounded values, `sqrt` of a computed value
//!   gets `+ 1` (its slope at 0 would turn rounding noise into visible errors);
//! - comparisons (in `where`) and argmin results that feed later operations only read "exact"
//!   values (inputs and operations that round identically in any order and precision:
//!   negation, abs, transpose, max/min, gather, diag, counts), so both sides take the same
//!   branch; an argmin of a computed value is only an output, compared with a near-tie margin.
//!
//! A failure also reports `plan lint` findings: storage invariants of the plan (no step reads
//! what it writes; values sharing a buffer or an output's storage have disjoint lifetimes).
//!
//! Tools (ignored tests, run with `-- --ignored --nocapture`):
//! - `survey`: runs `POPCORN_SURVEY_CASES` cases (default 2000) and prints the shortest
//!   failing programs of each kind of failure;
//! - `replay`: runs one hand-written program (`POPCORN_REPLAY=file.pop`,
//!   `POPCORN_REPLAY_DIMS=n=3,m=2`, `POPCORN_REPLAY_BOUNDS=labels<m`, `POPCORN_REPLAY_PLAN=1`
//!   or `steps` to print the plans);
//! - `show_generated_programs`: prints a few programs and how often each feature appears.

mod common;

use common::reference::{evaluate, RefValue};
use common::*;
use popcorn_dsl::{ContractionPolicy, DType, PlannerConfig, Program, Target};
use popcorn_runtime::{Args, Tensor};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fmt;

/// Sizes a dimension may take.
const SIZES: [usize; 7] = [1, 2, 3, 5, 7, 16, 33];
/// Names of the dimensions (the first few are used).
const DIM_NAMES: [&str; 4] = ["n", "m", "p", "q"];
/// Scalar literals element-wise operations may use (all exact).
const LITERALS: [&str; 3] = ["0.5", "2", "0"];

/// A choice sequence: `pick(n)` reads the next choice modulo `n`, and 0 once exhausted.
struct Choices<'a> {
    v: &'a [u32],
    pos: usize,
}

impl Choices<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let x = self.v.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        x as usize % n.max(1)
    }
}

/// Storage of a generated value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Dense,
    Csr,
    Index,
    Scalar,
}

/// A value usable as an operand: a name (or a literal, or `name^T`) with its symbolic type.
#[derive(Clone, Debug)]
struct Val {
    text: String,
    kind: Kind,
    rows: &'static str,
    cols: &'static str,
    /// Rounds identically in any order and precision (see the module docs).
    exact: bool,
    /// For index vectors: the dimension every label is below.
    bound: &'static str,
    /// Whether this is a bare name (so it may be transposed by appending `^T`).
    named: bool,
}

impl Val {
    fn new(
        text: impl Into<String>,
        kind: Kind,
        rows: &'static str,
        cols: &'static str,
        exact: bool,
    ) -> Val {
        Val {
            text: text.into(),
            kind,
            rows,
            cols,
            exact,
            bound: "1",
            named: false,
        }
    }

    fn scalar_literal(text: &str) -> Val {
        Val::new(text, Kind::Scalar, "1", "1", true)
    }

    fn transposed(&self) -> Val {
        Val {
            text: format!("{}^T", self.text),
            rows: self.cols,
            cols: self.rows,
            named: false,
            ..self.clone()
        }
    }

    fn is_elementwise_operand(&self) -> bool {
        matches!(self.kind, Kind::Dense | Kind::Scalar)
    }
}

/// How a type is written in a signature.
fn type_text(kind: Kind, rows: &str, cols: &str) -> String {
    match kind {
        Kind::Scalar => "Scalar".into(),
        Kind::Index => format!("Index[{rows}]"),
        Kind::Csr => format!("Csr[{rows}, {cols}]"),
        Kind::Dense if rows == "1" && cols == "1" => "Dense[1, 1]".into(),
        Kind::Dense if cols == "1" => format!("Col[{rows}]"),
        Kind::Dense if rows == "1" => format!("Row[{cols}]"),
        Kind::Dense => format!("Dense[{rows}, {cols}]"),
    }
}

/// Symbolic broadcasting: equal dimensions, or a literal 1 against anything.
fn bcast(a: &'static str, b: &'static str) -> Option<&'static str> {
    if a == b {
        Some(a)
    } else if a == "1" {
        Some(b)
    } else if b == "1" {
        Some(a)
    } else {
        None
    }
}

/// The broadcast shape of element-wise operands (scalars broadcast everywhere).
fn bcast_all(vals: &[&Val]) -> Option<(&'static str, &'static str)> {
    let (mut r, mut c) = ("1", "1");
    for v in vals.iter().filter(|v| v.kind == Kind::Dense) {
        r = bcast(r, v.rows)?;
        c = bcast(c, v.cols)?;
    }
    Some((r, c))
}

/// A tensor or scalar parameter of a generated program.
#[derive(Clone, Debug)]
struct InputSpec {
    name: String,
    kind: Kind,
    rows: &'static str,
    cols: &'static str,
    /// Index inputs: labels are below this dimension.
    bound: &'static str,
    /// CSR inputs: the probability of each entry being stored.
    density: f64,
}

/// An output and how to compare it.
#[derive(Clone, Debug)]
struct OutputSpec {
    name: String,
    /// Declared `Scalar` (read with `Outputs::scalar`).
    scalar: bool,
    /// Index outputs (argmin): the reference-only output holding the argmin's operand, and
    /// whether that operand is exact (then labels must be equal, not just near-ties).
    margin: Option<(String, bool)>,
}

/// A generated test case.
#[derive(Clone)]
struct Case {
    source: String,
    /// The same program with extra outputs for argmin margins (reference only).
    ref_source: String,
    dims: Vec<(&'static str, usize)>,
    inputs: Vec<InputSpec>,
    outputs: Vec<OutputSpec>,
    seed: u64,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\n--- program ---\n{}", self.source)?;
        let dims: Vec<String> = self.dims.iter().map(|(d, v)| format!("{d}={v}")).collect();
        writeln!(f, "dims: {}; input seed: {}", dims.join(" "), self.seed)?;
        for i in &self.inputs {
            if i.kind == Kind::Index {
                writeln!(f, "  {}: labels below {}", i.name, i.bound)?;
            } else if i.kind == Kind::Csr {
                writeln!(f, "  {}: density {}", i.name, i.density)?;
            }
        }
        Ok(())
    }
}

/// One statement: its text and the value it binds.
struct Stmt {
    text: String,
    val: Val,
    /// For `argmin_rows(x)`: the operand `x`.
    margin_of: Option<Val>,
}

/// Builds a program from choices.
struct Generator<'a> {
    ch: Choices<'a>,
    dims: Vec<&'static str>,
    /// Dimensions that appear in the inputs' types (usable as scalars in the body).
    input_dims: Vec<&'static str>,
    scalar_inputs: Vec<String>,
    pool: Vec<Val>,
}

const NUM_OPS: usize = 17;

impl Generator<'_> {
    fn dim(&mut self) -> &'static str {
        let n = self.dims.len();
        self.dims[self.ch.pick(n)]
    }

    /// Every value usable as an operand: pool values, their transposes, scalar literals.
    fn views(&self) -> Vec<Val> {
        let mut v = Vec::new();
        for p in &self.pool {
            v.push(p.clone());
            if p.named && matches!(p.kind, Kind::Dense | Kind::Csr) {
                v.push(p.transposed());
            }
        }
        v.extend(LITERALS.iter().map(|l| Val::scalar_literal(l)));
        v
    }

    fn choose(&mut self, cands: Vec<Val>) -> Option<Val> {
        if cands.is_empty() {
            return None;
        }
        let i = self.ch.pick(cands.len());
        cands.into_iter().nth(i)
    }

    fn choose_where(&mut self, f: impl Fn(&Val) -> bool) -> Option<Val> {
        let cands: Vec<Val> = self.views().into_iter().filter(|v| f(v)).collect();
        self.choose(cands)
    }

    fn dense(&mut self) -> Option<Val> {
        self.choose_where(|v| v.kind == Kind::Dense)
    }

    /// An element-wise operand that broadcasts against all of `with`.
    fn compatible(&mut self, with: &[&Val], exact: bool) -> Option<Val> {
        let with: Vec<Val> = with.iter().map(|v| (*v).clone()).collect();
        self.choose_where(|v| {
            let mut all: Vec<&Val> = with.iter().collect();
            all.push(v);
            v.is_elementwise_operand() && (!exact || v.exact) && bcast_all(&all).is_some()
        })
    }

    fn exact_index(&mut self) -> Option<Val> {
        self.choose_where(|v| v.kind == Kind::Index && v.exact)
    }

    fn dense_result(
        text: String,
        rows: &'static str,
        cols: &'static str,
        exact: bool,
    ) -> Option<Stmt> {
        Some(Stmt {
            text,
            val: Val::new("", Kind::Dense, rows, cols, exact),
            margin_of: None,
        })
    }

    /// A scalar factor for a product: a scalar parameter, a dimension, or a literal.
    fn factor(&mut self) -> String {
        let mut f: Vec<String> = self.scalar_inputs.clone();
        f.extend(self.input_dims.iter().map(|d| d.to_string()));
        f.push("0.5".into());
        let i = self.ch.pick(f.len());
        f.swap_remove(i)
    }

    fn statement(&mut self, op: usize) -> Option<Stmt> {
        match op {
            // Unary maps.
            0 => {
                let x = self.dense()?;
                let t = &x.text;
                let (text, exact) = match self.ch.pick(7) {
                    0 => (format!("-{t}"), x.exact),
                    1 => (format!("abs({t})"), x.exact),
                    2 => (format!("tanh({t})"), false),
                    3 => (format!("exp(-abs({t}))"), false),
                    4 => (format!("exp(tanh({t}))"), false),
                    5 if x.exact => (format!("sqrt(abs({t}))"), false),
                    5 => (format!("sqrt(abs({t}) + 1)"), false),
                    _ => (format!("pow(tanh({t}), 2)"), false),
                };
                Self::dense_result(text, x.rows, x.cols, exact)
            }
            // Binary maps with broadcasting.
            1 => {
                let x = self.dense()?;
                let y = self.compatible(&[&x], false)?;
                let (r, c) = bcast_all(&[&x, &y])?;
                let (a, b) = if self.ch.pick(2) == 0 {
                    (&x.text, &y.text)
                } else {
                    (&y.text, &x.text)
                };
                let (text, exact) = match self.ch.pick(7) {
                    0 => (format!("{a} + {b}"), false),
                    1 => (format!("{a} - {b}"), false),
                    2 => (format!("{a} .* {b}"), false),
                    3 => (format!("{a} / (abs({b}) + 1)"), false),
                    4 => (format!("max({a}, {b})"), x.exact && y.exact),
                    5 => (format!("min({a}, {b})"), x.exact && y.exact),
                    // `*` with a scalar side is element-wise scaling.
                    _ if y.kind == Kind::Scalar => (format!("{} * {}", y.text, x.text), false),
                    _ => (format!("{a} .* {b}"), false),
                };
                Self::dense_result(text, r, c, exact)
            }
            // where(c1 op c2, a, b) with exact comparison operands.
            2 => {
                let a = self.dense()?;
                let b = self.compatible(&[&a], false)?;
                let c1 = self.compatible(&[&a, &b], true)?;
                let c2 = self.compatible(&[&a, &b, &c1], true)?;
                let (r, c) = bcast_all(&[&a, &b, &c1, &c2])?;
                let cmp = [">", "<", ">=", "<="][self.ch.pick(4)];
                let text = format!(
                    "where({} {cmp} {}, {}, {})",
                    c1.text, c2.text, a.text, b.text
                );
                Self::dense_result(text, r, c, a.exact && b.exact)
            }
            // Matrix products (dense, CSR, vectors, selection matrices).
            3 | 4 => {
                let mut views: Vec<Val> = self
                    .views()
                    .into_iter()
                    .filter(|v| matches!(v.kind, Kind::Dense | Kind::Csr))
                    .collect();
                let indexes: Vec<Val> = self
                    .views()
                    .into_iter()
                    .filter(|v| v.kind == Kind::Index && v.exact)
                    .collect();
                for l in indexes {
                    let sel = Val::new(
                        format!("selection({}, {})", l.text, l.bound),
                        Kind::Csr,
                        l.bound,
                        l.rows,
                        false,
                    );
                    views.push(sel.transposed());
                    views.push(sel);
                }
                let left = self.choose(views.clone())?;
                let right = self.choose(
                    views
                        .into_iter()
                        .filter(|v| {
                            v.rows == left.cols && !(v.kind == Kind::Csr && left.kind == Kind::Csr)
                        })
                        .collect(),
                )?;
                let (l, r) = (&left.text, &right.text);
                let inner = left.cols;
                let (text, rows, cols) = match self.ch.pick(6) {
                    0 => (format!("{l} * {r}"), left.rows, right.cols),
                    1 if self.input_dims.contains(&inner) => {
                        (format!("{l} * {r} / {inner}"), left.rows, right.cols)
                    }
                    2 => (
                        format!("{} * {l} * {r}", self.factor()),
                        left.rows,
                        right.cols,
                    ),
                    3 => (format!("-0.5 * {l} * {r}"), left.rows, right.cols),
                    4 => (format!("{l} * (2 * {r})"), left.rows, right.cols),
                    5 => (format!("({l} * {r})^T"), right.cols, left.rows),
                    _ => (format!("{l} * {r}"), left.rows, right.cols),
                };
                Self::dense_result(text, rows, cols, false)
            }
            // diag of a square matrix.
            5 => {
                let x = self.choose_where(|v| v.kind == Kind::Dense && v.rows == v.cols)?;
                Self::dense_result(format!("diag({})", x.text), x.rows, "1", x.exact)
            }
            // Row reductions.
            6 => {
                let x = self.dense()?;
                let (f, exact) = [
                    ("sum_rows", false),
                    ("min_rows", x.exact),
                    ("max_rows", x.exact),
                    ("rownorms", false),
                ][self.ch.pick(4)];
                Self::dense_result(format!("{f}({})", x.text), x.rows, "1", exact)
            }
            // Column reductions.
            7 => {
                let x = self.dense()?;
                let (f, exact) = [
                    ("sum_cols", false),
                    ("min_cols", x.exact),
                    ("max_cols", x.exact),
                ][self.ch.pick(3)];
                Self::dense_result(format!("{f}({})", x.text), "1", x.cols, exact)
            }
            // Sum of all entries.
            8 => {
                let x = self.dense()?;
                Self::dense_result(format!("sum({})", x.text), "1", "1", false)
            }
            // argmin_rows.
            9 => {
                let x = self.dense()?;
                let val = Val {
                    bound: x.cols,
                    ..Val::new("", Kind::Index, x.rows, "1", x.exact)
                };
                Some(Stmt {
                    text: format!("argmin_rows({})", x.text),
                    val,
                    margin_of: Some(x),
                })
            }
            // gather(M, labels).
            10 => {
                let l = self.exact_index()?;
                let m = self.choose_where(|v| {
                    v.kind == Kind::Dense && v.rows == l.rows && v.cols == l.bound
                })?;
                Self::dense_result(
                    format!("gather({}, {})", m.text, l.text),
                    l.rows,
                    "1",
                    m.exact,
                )
            }
            // counts(labels, k).
            11 => {
                let l = self.exact_index()?;
                Self::dense_result(
                    format!("counts({}, {})", l.text, l.bound),
                    l.bound,
                    "1",
                    true,
                )
            }
            // A selection matrix bound to a name (never an output). Scaled sparse matrices are
            // only written inline in products: a named one used by two products is a
            // documented limitation of the planner.
            12 => {
                let l = self.exact_index()?;
                let val = Val::new("", Kind::Csr, l.bound, l.rows, false);
                Some(Stmt {
                    text: format!("selection({}, {})", l.text, l.bound),
                    val,
                    margin_of: None,
                })
            }
            // Transposes as values of their own.
            13 => {
                let x = self.choose_where(|v| v.kind == Kind::Dense && v.named)?;
                let text = if self.ch.pick(2) == 0 {
                    format!("{}^T", x.text)
                } else {
                    format!("(({})^T)^T", x.text)
                };
                let (r, c) = if text.ends_with(")^T)^T") {
                    (x.rows, x.cols)
                } else {
                    (x.cols, x.rows)
                };
                Self::dense_result(text, r, c, x.exact)
            }
            // Host scalar arithmetic (folded, never a node).
            14 => {
                let a = self.factor();
                let b = self.factor();
                Some(Stmt {
                    text: format!("{a} * 2 + {b}"),
                    val: Val::new("", Kind::Scalar, "1", "1", false),
                    margin_of: None,
                })
            }
            // A product consumed only by an epilogue and a row reduction: a fusable contraction.
            15 => {
                let left = self.dense()?;
                let right = self.choose_where(|v| v.kind == Kind::Dense && v.cols == left.cols)?;
                let p = format!("{} * ({})^T", left.text, right.text);
                let (text, cols) = match self.ch.pick(5) {
                    0 => (format!("sum_rows(exp(-abs({p})))"), "1"),
                    1 => (format!("max_rows({p} - 1)"), "1"),
                    2 => (
                        format!("min_rows(tanh({p}) + (rownorms({}))^T)", right.text),
                        "1",
                    ),
                    3 => (format!("rownorms(-2 * {p})"), "1"),
                    // Consumed by another product: stays a library call.
                    _ => (format!("exp(-abs({p})) * {}", right.text), right.cols),
                };
                Self::dense_result(text, left.rows, cols, false)
            }
            // Kernel-k-means-like distance: x + column broadcast + row broadcast of reductions.
            _ => {
                let x =
                    self.choose_where(|v| v.kind == Kind::Dense && v.rows != "1" && v.cols != "1")?;
                let text = format!("-2 * {t} + sum_rows({t}) + max_cols({t})", t = x.text);
                Self::dense_result(text, x.rows, x.cols, false)
            }
        }
    }
}

impl Case {
    fn generate(choices: &[u32], seed: u64) -> Case {
        let ch = Choices { v: choices, pos: 0 };
        let mut g = Generator {
            ch,
            dims: Vec::new(),
            input_dims: Vec::new(),
            scalar_inputs: Vec::new(),
            pool: Vec::new(),
        };
        let ndims = 1 + g.ch.pick(DIM_NAMES.len());
        let mut dims = Vec::new();
        for name in &DIM_NAMES[..ndims] {
            dims.push((*name, SIZES[g.ch.pick(SIZES.len())]));
            g.dims.push(*name);
        }
        // Inputs; the first is always dense so that every operation finds an operand.
        let ninputs = 1 + g.ch.pick(4);
        let mut inputs = Vec::new();
        for i in 0..ninputs {
            let name = format!("X{i}");
            let kind = if i == 0 { g.ch.pick(4) } else { g.ch.pick(7) };
            let (a, b) = (g.dim(), g.dim());
            let (kind, rows, cols, bound) = match kind {
                0 => (Kind::Dense, a, b, "1"),
                1 => (Kind::Dense, a, a, "1"),
                2 => (Kind::Dense, a, "1", "1"),
                3 => (Kind::Dense, "1", a, "1"),
                4 => (Kind::Csr, a, b, "1"),
                5 => (Kind::Index, a, "1", b),
                _ => (Kind::Scalar, "1", "1", "1"),
            };
            let density = [0.3, 0.0, 0.8][g.ch.pick(3)];
            for d in [rows, cols] {
                if d != "1" && !g.input_dims.contains(&d) {
                    g.input_dims.push(d);
                }
            }
            if kind == Kind::Scalar {
                g.scalar_inputs.push(name.clone());
            }
            g.pool.push(Val {
                bound,
                named: true,
                ..Val::new(name.clone(), kind, rows, cols, true)
            });
            inputs.push(InputSpec {
                name,
                kind,
                rows,
                cols,
                bound,
                density,
            });
        }
        // Statements.
        let nstmts = 1 + g.ch.pick(8);
        let mut stmts: Vec<(String, Stmt)> = Vec::new();
        for s in 0..nstmts {
            let first = g.ch.pick(NUM_OPS);
            let stmt = (0..NUM_OPS)
                .find_map(|k| g.statement((first + k) % NUM_OPS))
                .expect("unary maps always apply");
            let name = format!("t{s}");
            g.pool.push(Val {
                text: name.clone(),
                named: stmt.val.kind != Kind::Scalar,
                ..stmt.val.clone()
            });
            stmts.push((name, stmt));
        }
        if stmts.iter().all(|(_, s)| s.val.kind == Kind::Csr) {
            let x = g.pool[0].clone();
            let val = Val::new("", Kind::Dense, "1", x.cols, false);
            stmts.push((
                format!("t{nstmts}"),
                Stmt {
                    text: format!("sum_cols({})", x.text),
                    val,
                    margin_of: None,
                },
            ));
        }
        // Outputs: the last non-CSR statement, and each other one with probability 1/2.
        let last = stmts
            .iter()
            .rposition(|(_, s)| s.val.kind != Kind::Csr)
            .expect("one non-CSR statement");
        let mut outputs = Vec::new();
        let mut out_decls = Vec::new();
        let mut ref_decls = Vec::new();
        let mut ref_stmts = Vec::new();
        for (i, (name, s)) in stmts.iter().enumerate() {
            if s.val.kind == Kind::Csr || (i != last && g.ch.pick(2) == 0) {
                continue;
            }
            let v = &s.val;
            let scalar = v.kind == Kind::Scalar
                || (v.kind == Kind::Dense && v.rows == "1" && v.cols == "1" && g.ch.pick(2) == 0);
            let ty = if scalar {
                "Scalar".to_string()
            } else {
                type_text(v.kind, v.rows, v.cols)
            };
            out_decls.push(format!("{name}: {ty}"));
            let margin = s.margin_of.as_ref().map(|x| {
                let m = format!("mrg_{name}");
                ref_decls.push(format!("{m}: {}", type_text(Kind::Dense, x.rows, x.cols)));
                ref_stmts.push(format!("    {m} = {};", x.text));
                (m, x.exact)
            });
            outputs.push(OutputSpec {
                name: name.clone(),
                scalar,
                margin,
            });
        }
        let params: Vec<String> = inputs
            .iter()
            .map(|i| format!("{}: {}", i.name, type_text(i.kind, i.rows, i.cols)))
            .collect();
        let body: Vec<String> = stmts
            .iter()
            .map(|(n, s)| format!("    {n} = {};", s.text))
            .collect();
        let source = format!(
            "fn random({}) -> ({}) {{\n{}\n}}\n",
            params.join(", "),
            out_decls.join(", "),
            body.join("\n")
        );
        let all_decls: Vec<String> = out_decls.iter().chain(&ref_decls).cloned().collect();
        let ref_body: Vec<String> = body.iter().chain(&ref_stmts).cloned().collect();
        let ref_source = format!(
            "fn random({}) -> ({}) {{\n{}\n}}\n",
            params.join(", "),
            all_decls.join(", "),
            ref_body.join("\n")
        );
        Case {
            source,
            ref_source,
            dims,
            inputs,
            outputs,
            seed,
        }
    }

    fn size(&self, d: &str) -> usize {
        if d == "1" {
            return 1;
        }
        self.dims
            .iter()
            .find(|(n, _)| *n == d)
            .map(|(_, v)| *v)
            .expect("generated dimension")
    }

    /// The inputs' values, from the seed.
    fn input_values(&self) -> Vec<(String, RefValue, Option<CsrData>)> {
        let mut out = Vec::new();
        for (i, spec) in self.inputs.iter().enumerate() {
            let mut rng = SplitMix64::new(self.seed.wrapping_add(0x1234_5678 * i as u64));
            let (rows, cols) = (self.size(spec.rows), self.size(spec.cols));
            let (value, csr) = match spec.kind {
                Kind::Dense => (
                    RefValue::dense(rows, cols, random_values(&mut rng, rows * cols)),
                    None,
                ),
                Kind::Csr => {
                    let c = random_csr(&mut rng, rows, cols, spec.density);
                    (c.to_ref(), Some(c))
                }
                Kind::Index => (
                    RefValue::Index(random_labels(&mut rng, rows, self.size(spec.bound))),
                    None,
                ),
                Kind::Scalar => (RefValue::Scalar(rng.uniform(-1.0, 1.0)), None),
            };
            out.push((spec.name.clone(), value, csr));
        }
        out
    }
}

/// The planner configurations every case runs under, with their tolerances.
fn configurations() -> Vec<(&'static str, PlannerConfig, f64)> {
    let base = PlannerConfig::default();
    vec![
        (
            "f64, fused",
            PlannerConfig {
                dtype: DType::F64,
                ..base.clone()
            },
            1e-9,
        ),
        // Without fusion, with GEMM instead of SYRK for every X * X^T, and with products by a
        // selection matrix as cluster sums.
        (
            "f64, unfused, gemm, cluster sums",
            PlannerConfig {
                dtype: DType::F64,
                fusion: false,
                syrk_gemm_ratio: Some(0.0),
                cluster_sums_max_k: Some(1024),
                tf32: false,
                syrk_block_rows: None,
                overlap: false,
                contractions: ContractionPolicy::Never,
                partition: None,
                half_storage: Default::default(),
                half_products: None,
                tf32x3: false,
            },
            1e-9,
        ),
        // Every product its consumers allow fused into a contraction.
        (
            "f64, contractions everywhere",
            PlannerConfig {
                dtype: DType::F64,
                contractions: ContractionPolicy::Always,
                ..base.clone()
            },
            1e-9,
        ),
        (
            "f32, contractions everywhere",
            PlannerConfig {
                dtype: DType::F32,
                contractions: ContractionPolicy::Always,
                ..base.clone()
            },
            1e-3,
        ),
        // SYRKs in 64-row block rows, so small cases get several bands of an overlapped map.
        (
            "f32, fused, 64-row syrk blocks",
            PlannerConfig {
                dtype: DType::F32,
                syrk_block_rows: Some(64),
                ..base.clone()
            },
            1e-3,
        ),
        // The CPU backend's own plans: one library SYRK, no pipelines.
        (
            "f64, fused, cpu target",
            PlannerConfig {
                dtype: DType::F64,
                ..base
            },
            1e-9,
        ),
    ]
}

/// The machine a configuration plans for: the CPU backend's own target for the configuration
/// named so, else the reference GPU (plans are portable: the CPU backend runs GPU plans, with
/// their block rows, lower-triangle SYRKs and pipelines, so every case checks them too).
fn target_of(label: &str) -> Target {
    if label.contains("cpu target") {
        Target::cpu(2)
    } else {
        Target::reference_gpu()
    }
}

/// The reference outputs of a case.
fn reference_outputs(case: &Case) -> Result<BTreeMap<String, RefValue>, String> {
    let ref_program = Program::parse(&case.ref_source)
        .map_err(|e| format!("the reference program does not parse:\n{e}"))?;
    let mut inputs = BTreeMap::new();
    let mut scalars = BTreeMap::new();
    for (name, v, _) in case.input_values() {
        match v {
            RefValue::Scalar(s) => {
                scalars.insert(name, s);
            }
            other => {
                inputs.insert(name, other);
            }
        }
    }
    let dims = case.dims.iter().map(|(d, v)| (d.to_string(), *v)).collect();
    evaluate(&ref_program, &inputs, &scalars, &dims)
        .map_err(|e| format!("the reference fails: {e}"))
}

/// Runs a case under one configuration and compares every output with the reference.
fn check_config(
    case: &Case,
    program: &Program,
    reference: &BTreeMap<String, RefValue>,
    label: &str,
    config: PlannerConfig,
    rtol: f64,
) -> Result<(), String> {
    let ctx = cpu_with(config).with_target(target_of(label));
    let values = case.input_values();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut scalars: Vec<(String, f64)> = Vec::new();
    for (name, v, csr) in &values {
        let t = match (v, csr) {
            (RefValue::Dense { rows, cols, data }, _) => ctx.dense(*rows, *cols, data),
            (RefValue::Csr { rows, cols, .. }, Some(c)) => {
                ctx.csr(*rows, *cols, &c.row_ptr, &c.col_idx, &c.values)
            }
            (RefValue::Index(l), _) => ctx.index(l),
            (RefValue::Scalar(s), _) => {
                scalars.push((name.clone(), *s));
                continue;
            }
            (RefValue::Csr { .. }, None) => unreachable!("CSR inputs keep their data"),
        }
        .map_err(|e| format!("[{label}] cannot make input {name}: {e}"))?;
        tensors.push((name.clone(), t));
    }
    let wanted_dims = program.dims();
    let mut args = Args::new();
    for (name, t) in &tensors {
        args = args.tensor(name, t);
    }
    for (name, s) in &scalars {
        args = args.scalar(name, *s);
    }
    for (d, v) in &case.dims {
        if wanted_dims.contains(*d) {
            args = args.dim(d, *v);
        }
    }
    let lint = |e: String| -> String {
        let bound = case.dims.iter().map(|(d, v)| (d.to_string(), *v)).collect();
        match ctx.plan(program, &bound) {
            Ok(plan) => {
                let findings = plan_lint(&plan);
                if findings.is_empty() {
                    e
                } else {
                    format!("{e} (plan lint: {})", findings.join("; "))
                }
            }
            Err(_) => e,
        }
    };
    let out = ctx
        .run(program, &args)
        .map_err(|e| lint(format!("[{label}] the run fails: {e}")))?;
    compare_outputs(case, &ctx, &out, reference, label, rtol).map_err(lint)
}

/// Compares every output of a run with the reference.
fn compare_outputs(
    case: &Case,
    ctx: &popcorn_runtime::Context,
    out: &popcorn_runtime::Outputs,
    reference: &BTreeMap<String, RefValue>,
    label: &str,
    rtol: f64,
) -> Result<(), String> {
    for o in &case.outputs {
        let want = reference
            .get(&o.name)
            .ok_or_else(|| format!("the reference has no output {}", o.name))?;
        let what = format!("[{label}] output {}", o.name);
        if o.scalar != matches!(want, RefValue::Scalar(_)) {
            return Err(format!(
                "{what}: declared scalar = {} but the reference gives {want:?}",
                o.scalar
            ));
        }
        match want {
            RefValue::Scalar(w) => {
                let got = out.scalar(&o.name).map_err(|e| format!("{what}: {e}"))?;
                check_close(&what, &[got], &[*w], rtol)?;
            }
            RefValue::Dense { data, .. } => {
                let t = out.tensor(&o.name).map_err(|e| format!("{what}: {e}"))?;
                let got = ctx.to_f64(t).map_err(|e| format!("{what}: {e}"))?;
                check_close(&what, &got, data, rtol)?;
            }
            RefValue::Index(w) => {
                let t = out.tensor(&o.name).map_err(|e| format!("{what}: {e}"))?;
                let got = ctx.to_u32(t).map_err(|e| format!("{what}: {e}"))?;
                let (m, exact) = o
                    .margin
                    .as_ref()
                    .ok_or_else(|| format!("{what}: no margin recorded"))?;
                match reference.get(m) {
                    Some(RefValue::Dense { cols, data, .. }) => {
                        let tol = if *exact { 0.0 } else { rtol * scale_of(data) };
                        if *exact && got != *w {
                            return Err(format!("{what}: labels {got:?}, expected exactly {w:?}"));
                        }
                        check_labels(&what, &got, w, data, *cols, tol)?;
                    }
                    other => return Err(format!("{what}: margin value is {other:?}")),
                }
            }
            RefValue::Csr { .. } => return Err(format!("{what}: CSR outputs are not generated")),
        }
    }
    Ok(())
}

/// Storage invariants of a plan, checked independently of the planner: no step reads a value
/// it writes; two values that share storage (a plan buffer, or an output's tensor through
/// `InOutput`) have disjoint lifetimes. A value is live from the step that writes it to the
/// last step that reads it (program outputs: to the end; the input of a SYRK whose map is
/// overlapped with it: through the map's step). Reported on failures as a hint.
fn plan_lint(plan: &popcorn_dsl::Plan) -> Vec<String> {
    use popcorn_dsl::plan::Home;
    let mut findings = Vec::new();
    let mut def: BTreeMap<usize, usize> = BTreeMap::new();
    let mut last: BTreeMap<usize, usize> = BTreeMap::new();
    for (s, step) in plan.steps.iter().enumerate() {
        let overlapped = plan.pipeline_from(s).is_some();
        for i in &step.inputs {
            if step.outputs.contains(i) {
                findings.push(format!("step {s} reads and writes {}", plan.value(*i).name));
            }
            last.insert(i.0, if overlapped { s + 1 } else { s });
        }
        for o in &step.outputs {
            def.entry(o.0).or_insert(s);
        }
    }
    for (_, v) in &plan.outputs {
        last.insert(v.0, usize::MAX);
    }
    let mut places: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, v) in plan.values.iter().enumerate() {
        match &v.home {
            Home::Temp(ids) => {
                for b in ids {
                    places.entry(format!("buffer {}", b.0)).or_default().push(i);
                }
            }
            Home::Output(n) | Home::InOutput(n) => {
                places.entry(format!("output {n}")).or_default().push(i)
            }
            _ => {}
        }
    }
    for (place, vals) in &places {
        for (x, &a) in vals.iter().enumerate() {
            for &b in &vals[x + 1..] {
                let (Some(&da), Some(&db)) = (def.get(&a), def.get(&b)) else {
                    continue;
                };
                let (la, lb) = (
                    last.get(&a).copied().unwrap_or(da),
                    last.get(&b).copied().unwrap_or(db),
                );
                let (name_a, name_b) = (&plan.values[a].name, &plan.values[b].name);
                if da == db {
                    findings.push(format!(
                        "{name_a} and {name_b} are both written by step {da} into {place}"
                    ));
                } else if (da < db && db < la) || (db < da && da < lb) {
                    findings.push(format!(
                        "{name_a} (steps {da}..{}) and {name_b} (steps {db}..{}) overlap in {place}",
                        if la == usize::MAX { "end".to_string() } else { la.to_string() },
                        if lb == usize::MAX { "end".to_string() } else { lb.to_string() },
                    ));
                }
            }
        }
    }
    findings
}

/// Checks a case under every configuration.
fn check_case(case: &Case) -> Result<(), String> {
    let program = Program::parse(&case.source)
        .map_err(|e| format!("the generated program does not parse:\n{e}"))?;
    let reference = reference_outputs(case)?;
    let errors: Vec<String> = configurations()
        .into_iter()
        .filter_map(|(label, config, rtol)| {
            check_config(case, &program, &reference, label, config, rtol).err()
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn cases() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(any::<u32>(), 0..400),
        any::<u64>(),
    )
        .prop_map(|(choices, seed)| Case::generate(&choices, seed))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 4096,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn planned_cpu_runs_match_the_reference(case in cases()) {
        if let Err(e) = check_case(&case) {
            prop_assert!(false, "{}\n{:?}", e, case);
        }
    }
}

/// The generator itself: every generated program type-checks and the reference evaluates it
/// (independent of the planner and the backends).
#[test]
fn generated_programs_are_well_typed() {
    let mut rng = SplitMix64::new(7);
    for _ in 0..2000 {
        let len = rng.below(400);
        let choices: Vec<u32> = (0..len).map(|_| rng.next_u64() as u32).collect();
        let case = Case::generate(&choices, rng.next_u64());
        Program::parse(&case.source).unwrap_or_else(|e| panic!("{e}\n{case:?}"));
        reference_outputs(&case).unwrap_or_else(|e| panic!("{e}\n{case:?}"));
    }
}

/// Prints a few generated programs (`cargo test --test random_programs -- --ignored --nocapture`).
#[test]
#[ignore]
fn show_generated_programs() {
    let mut rng = SplitMix64::new(11);
    let mut features: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..1000 {
        let choices: Vec<u32> = (0..rng.below(400)).map(|_| rng.next_u64() as u32).collect();
        let case = Case::generate(&choices, 0);
        if i < 12 {
            println!("{case:?}");
        }
        for f in [
            "selection(",
            "argmin_rows(",
            "gather(",
            "counts(",
            "where(",
            "Csr[",
            "diag(",
            "^T)^T",
            "sum(",
            "rownorms(",
        ] {
            *features.entry(f).or_default() += usize::from(case.source.contains(f));
        }
    }
    println!("programs (of 1000) containing each feature: {features:?}");
}

/// The simplest case (no choices) runs: a sanity check that does not depend on proptest.
#[test]
fn the_simplest_generated_program_runs() {
    let case = Case::generate(&[], 1);
    check_case(&case).unwrap_or_else(|e| panic!("{e}\n{case:?}"));
}

impl Case {
    /// A case from hand-written source (a minimised failure): inputs and outputs come from
    /// the signature; `bounds` gives the label bound of each index input; an `Index` output
    /// must be bound by a statement `name = argmin_rows(x);` (its margin is `x`).
    fn from_source(
        source: &str,
        dims: &[(&'static str, usize)],
        bounds: &[(&str, &'static str)],
        seed: u64,
    ) -> Case {
        let program = Program::parse(source).unwrap_or_else(|e| panic!("{e}"));
        let dim_text = |d: &popcorn_dsl::Dim| -> &'static str {
            match d {
                popcorn_dsl::Dim::Fixed(1) => "1",
                popcorn_dsl::Dim::Sym(s) => dims
                    .iter()
                    .find(|(n, _)| *n == s)
                    .map(|(n, _)| *n)
                    .expect("every dimension is given"),
                other => panic!("literal dimension {other} is not supported here"),
            }
        };
        let kind_of = |t: &popcorn_dsl::Type| match t.storage {
            popcorn_dsl::Storage::Dense => Kind::Dense,
            popcorn_dsl::Storage::Csr => Kind::Csr,
            popcorn_dsl::Storage::Index => Kind::Index,
            popcorn_dsl::Storage::Scalar => Kind::Scalar,
        };
        let inputs = program
            .params
            .iter()
            .map(|p| InputSpec {
                name: p.name.clone(),
                kind: kind_of(&p.ty),
                rows: dim_text(&p.ty.shape.rows),
                cols: dim_text(&p.ty.shape.cols),
                bound: bounds
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .map(|(_, b)| *b)
                    .unwrap_or("1"),
                density: 0.3,
            })
            .collect();
        // An index output `l = argmin_rows(x);` gets a reference-only output `mrg_l = x;`,
        // declared with the type of the argmin's operand in the checked graph.
        let mut outputs = Vec::new();
        let mut decls = Vec::new();
        let mut ref_stmts = Vec::new();
        for (o, (_, node)) in program.outputs.iter().zip(&program.graph.outputs) {
            let mut margin = None;
            if o.ty.storage == popcorn_dsl::Storage::Index {
                let prefix = format!("{} = argmin_rows(", o.name);
                let x = source
                    .lines()
                    .map(str::trim)
                    .find_map(|l| l.strip_prefix(&prefix)?.strip_suffix(");"))
                    .expect("an index output is bound by `name = argmin_rows(x);`");
                let m = format!("mrg_{}", o.name);
                let ty = &program.graph.node(program.graph.operands(*node)[0]).ty;
                let (rows, cols) = (dim_text(&ty.shape.rows), dim_text(&ty.shape.cols));
                decls.push(format!("{m}: {}", type_text(Kind::Dense, rows, cols)));
                ref_stmts.push(format!("    {m} = {x};"));
                margin = Some((m, false));
            }
            outputs.push(OutputSpec {
                name: o.name.clone(),
                scalar: o.ty.is_scalar(),
                margin,
            });
        }
        let close = source.rfind('}').expect("a program body");
        let open_outputs = source.find("-> (").expect("outputs") + "-> (".len();
        let close_outputs = open_outputs + source[open_outputs..].find(')').expect("outputs close");
        let mut ref_source = String::new();
        ref_source.push_str(&source[..close_outputs]);
        for d in &decls {
            ref_source.push_str(", ");
            ref_source.push_str(d);
        }
        ref_source.push_str(&source[close_outputs..close]);
        for s in &ref_stmts {
            ref_source.push_str(s);
            ref_source.push('\n');
        }
        ref_source.push_str(&source[close..]);
        Case {
            source: source.to_string(),
            ref_source,
            dims: dims.to_vec(),
            inputs,
            outputs,
            seed,
        }
    }
}

/// Replays a hand-written case: `POPCORN_REPLAY=path/to/program.pop POPCORN_REPLAY_DIMS=n=3,k=2
/// [POPCORN_REPLAY_BOUNDS=labels<k] [POPCORN_REPLAY_SEED=1] cargo test --test random_programs
/// replay -- --ignored --nocapture`.
#[test]
#[ignore]
fn replay() {
    let path = std::env::var("POPCORN_REPLAY")
        .expect("set POPCORN_REPLAY to a .pop file with one program");
    let source = std::fs::read_to_string(&path).expect("readable program");
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let dims: Vec<(&'static str, usize)> = std::env::var("POPCORN_REPLAY_DIMS")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("dims as name=value");
            (leak(k.trim()), v.trim().parse().expect("a size"))
        })
        .collect();
    let bounds_text = std::env::var("POPCORN_REPLAY_BOUNDS").unwrap_or_default();
    let bounds: Vec<(&str, &'static str)> = bounds_text
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('<').expect("bounds as input<dim");
            (k.trim(), leak(v.trim()))
        })
        .collect();
    let seed = std::env::var("POPCORN_REPLAY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let case = Case::from_source(&source, &dims, &bounds, seed);
    if std::env::var("POPCORN_REPLAY_PLAN").is_ok() {
        let program = Program::parse(&case.source).expect("parsed above");
        let bound: popcorn_dsl::DimBindings =
            dims.iter().map(|(d, v)| (d.to_string(), *v)).collect();
        for (label, config, _) in configurations() {
            match cpu_with(config)
                .with_target(Target::reference_gpu())
                .plan(&program, &bound)
            {
                Ok(plan) => {
                    println!("--- plan [{label}] ---\n{plan}");
                    for v in &plan.values {
                        println!("  value {}: {:?}", v.name, v.home);
                    }
                    if std::env::var("POPCORN_REPLAY_PLAN").is_ok_and(|v| v == "steps") {
                        for s in &plan.steps {
                            println!("  step {:#?}", s.op);
                        }
                    }
                }
                Err(e) => println!("--- plan [{label}] fails: {e}"),
            }
        }
    }
    match check_case(&case) {
        Ok(()) => println!("OK{case:?}"),
        Err(e) => panic!("{e}\n{case:?}"),
    }
}

/// Surveys many random cases and prints, for each kind of failure, the shortest failing
/// programs (`POPCORN_SURVEY_CASES=5000 cargo test --test random_programs survey -- --ignored
/// --nocapture`). Failures are grouped by configuration and by the error text with numbers
/// and names removed.
#[test]
#[ignore]
fn survey() {
    let cases: usize = std::env::var("POPCORN_SURVEY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut rng = SplitMix64::new(
        std::env::var("POPCORN_SURVEY_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(99),
    );
    let mut classes: BTreeMap<String, (usize, Vec<(String, Case)>)> = BTreeMap::new();
    for _ in 0..cases {
        let choices: Vec<u32> = (0..rng.below(400)).map(|_| rng.next_u64() as u32).collect();
        let case = Case::generate(&choices, rng.next_u64());
        let Err(errors) = check_case(&case) else {
            continue;
        };
        for e in errors.lines() {
            let cut = ["mismatches", "got label", "labels"]
                .iter()
                .filter_map(|w| e.find(w).map(|i| i + w.len()))
                .min()
                .unwrap_or(e.len());
            let mut key = e[..cut].to_string();
            if let Some(at) = e.find("(plan lint: ") {
                let kinds = [
                    "reads and writes",
                    "both written by step",
                    "overlap in output",
                    "overlap in buffer",
                ];
                let found: Vec<&str> = kinds
                    .iter()
                    .copied()
                    .filter(|k| e[at..].contains(k))
                    .collect();
                key = format!(
                    "{} / plan lint: {}",
                    &e[..e.find(']').map_or(0, |i| i + 1)],
                    found.join(", ")
                );
            }
            let key: String = key
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect();
            let entry = classes.entry(key).or_default();
            entry.0 += 1;
            entry.1.push((e.to_string(), case.clone()));
            entry.1.sort_by_key(|(_, c)| c.source.len());
            entry.1.truncate(3);
        }
    }
    println!("{} failure classes over {cases} cases", classes.len());
    for (key, (count, examples)) in &classes {
        println!("\n=== {key} ({count} cases)");
        for (e, c) in examples {
            println!("{e}{c:?}");
        }
    }
}

/// A fixed case: what it checks, the program, dimension sizes, label bounds of index inputs.
type Reproducer = (
    &'static str,
    &'static str,
    &'static [(&'static str, usize)],
    &'static [(&'static str, &'static str)],
);

/// Minimised failures of the property test, kept as fixed cases.
const REPRODUCERS: &[Reproducer] = &[
    (
        "fuse: a cycle between groups that no single group's nodes show (CSE-shared X0^T)",
        "fn f(X0: Dense[n, n]) -> (t1: Dense[n, n], t4: Col[n], t5: Dense[n, n], t7: Dense[n, n]) { t1 = pow(tanh(X0), 2); t3 = diag(X0^T); t4 = diag(t1); t5 = X0^T - t4^T; t7 = where(2 < t3, t1, 2); }",
        &[("n", 3)],
        &[],
    ),
    (
        "cpu: a selection matrix in a reused, longer plan buffer",
        "fn f(X0: Dense[n, n], X1: Index[n], X2: Index[n]) -> (t1: Dense[n, n], t4: Dense[n, m]) { t1 = selection(X2, n)^T * X0; t4 = (selection(X1, m) * X0)^T; }",
        &[("n", 5), ("m", 1)],
        &[("X1", "m"), ("X2", "n")],
    ),
    (
        "canonicalize: a scaled sparse matrix written twice, merged by CSE, used by two products",
        "fn f(X1: Csr[n, m], X2: Dense[n, n]) -> (t2: Row[m], t4: Dense[n, m]) { t1 = X2 * (2 * X1); t2 = sum_cols(t1); t4 = X2^T * (2 * X1); }",
        &[("n", 1), ("m", 1)],
        &[],
    ),
    (
        "fuse: a map that adds a row reduction of a computed value",
        "fn f(X: Dense[n, n]) -> (Y: Dense[n, n]) { t = -X; Y = t + sum_rows(t); }",
        &[("n", 3)],
        &[],
    ),
    (
        "fuse: a map that adds a row reduction of a transposed view",
        "fn f(X: Dense[n, m]) -> (Y: Dense[m, n]) { Y = X^T + sum_rows(X^T); }",
        &[("n", 3), ("m", 4)],
        &[],
    ),
    (
        "fuse: min_rows of a computed row vector added to it",
        "fn f(x: Col[n]) -> (y: Row[n]) { r = -x^T; y = min_rows(r) + r; }",
        &[("n", 3)],
        &[],
    ),
    (
        "fuse: gather of a transposed computed value inside a map",
        "fn f(X: Dense[n, m], L: Index[m]) -> (Y: Dense[m, n]) { t = exp(X); Y = t^T .* gather(t^T, L); }",
        &[("n", 3), ("m", 4)],
        &[("L", "n")],
    ),
    (
        "schedule: a column reduction of a transposed view added to it",
        "fn f(X: Dense[m, m]) -> (Y: Dense[m, m]) { c = max_cols(X^T); Y = c + X^T; }",
        &[("m", 3)],
        &[],
    ),
    (
        "fuse: argmin_rows and gather of a transposed view in one kernel",
        "fn f(X: Dense[m, n]) -> (g: Col[n]) {\n    l = argmin_rows(X^T);\n    g = gather(X^T, l);\n}",
        &[("m", 3), ("n", 4)],
        &[],
    ),
    (
        "buffers: a temporary in an output's storage outlives the output's write",
        "fn f(x: Col[n]) -> (t1: Col[n], t2: Dense[n, n]) { t0 = exp(-x); t1 = tanh(x); t2 = x * t0^T; }",
        &[("n", 3)],
        &[],
    ),
    (
        "buffers: a temporary and an output written into one output's storage (n = 1)",
        "fn f(X: Dense[n, n]) -> (Y: Dense[n, n], d: Col[n]) { T = -2 * X + sum_rows(X) + max_cols(X); Y = max(T, X); d = diag(T); }",
        &[("n", 1)],
        &[],
    ),
    (
        "cpu counts: labels living in a longer buffer",
        "fn f(x: Col[p], X: Dense[m, p]) -> (c: Col[1], l: Index[m]) {\n    c = counts(argmin_rows(x), 1);\n    l = argmin_rows(X);\n}",
        &[("m", 16), ("p", 1)],
        &[],
    ),
];

/// Every minimised failure runs correctly under every configuration.
#[test]
fn minimised_failures_run_correctly() {
    let mut failures = Vec::new();
    for (what, source, dims, bounds) in REPRODUCERS {
        let case = Case::from_source(source, dims, bounds, 1);
        if let Err(e) = check_case(&case) {
            failures.push(format!("--- {what}\n{e}{case:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} minimised failures fail:\n{}",
        failures.len(),
        REPRODUCERS.len(),
        failures.join("\n")
    );
}
