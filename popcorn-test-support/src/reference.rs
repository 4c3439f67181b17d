//! An independent reference evaluator: runs a [`Program`]'s typed graph directly, in `f64`,
//! with the simplest possible loops and no planning, fusion or buffer reuse.
//!
//! Tests compare the planned backends against it. It shares with the rest of popcorn only the
//! IR types and the definitions of what each operation means: the element-wise operators'
//! `f64` values ([`UnaryOp::apply`](popcorn_dsl::kernel::UnaryOp::apply),
//! [`BinaryOp::apply`](popcorn_dsl::kernel::BinaryOp::apply)), the builtins' and library
//! products' reference semantics ([`OpFacts::eval`], [`popcorn_dsl::ir::LibOp::eval`]) and
//! [`ScalarExpr::eval`]; broadcasting, reductions and gathers are written out here. CSR
//! operands of products are densified first. Speed is not a goal.

use popcorn_dsl::ir::{NodeId, Op, Reduce};
use popcorn_dsl::ops::OpFacts;
pub use popcorn_dsl::value::RefValue;
use popcorn_dsl::value::{check_csr, densify, matmul, sparsify, Mat};
use popcorn_dsl::{Dim, Program, ScalarExpr, Storage, Type};
use std::collections::{BTreeMap, HashMap};

/// An operand of an element-wise operation: a scalar, or a dense matrix that broadcasts
/// along any side of size 1.
enum Elem<'a> {
    Scalar(f64),
    Dense(usize, usize, &'a [f64]),
}

impl Elem<'_> {
    fn get(&self, i: usize, j: usize) -> f64 {
        match self {
            Elem::Scalar(v) => *v,
            Elem::Dense(rows, cols, data) => {
                let r = if *rows == 1 { 0 } else { i };
                let c = if *cols == 1 { 0 } else { j };
                data[r * cols + c]
            }
        }
    }
}

/// The result shape of broadcasting `a` and `b` sizes (numpy rules on sides of 1).
fn broadcast(a: usize, b: usize) -> Option<usize> {
    if a == b {
        Some(a)
    } else if a == 1 {
        Some(b)
    } else if b == 1 {
        Some(a)
    } else {
        None
    }
}

/// Applies `f` element-wise over `operands` with broadcasting. All scalars give a scalar.
fn elementwise(operands: &[&RefValue], f: impl Fn(&[f64]) -> f64) -> Result<RefValue, String> {
    // Index vectors take part as columns of their indices (comparisons of labels).
    let as_values: Vec<Option<Vec<f64>>> = operands
        .iter()
        .map(|v| match v {
            RefValue::Index(ix) => Some(ix.iter().map(|x| *x as f64).collect()),
            _ => None,
        })
        .collect();
    let mut elems = Vec::with_capacity(operands.len());
    for (v, iv) in operands.iter().zip(&as_values) {
        elems.push(match (v, iv) {
            (_, Some(values)) => Elem::Dense(values.len(), 1, values.as_slice()),
            (RefValue::Scalar(x), None) => Elem::Scalar(*x),
            (RefValue::Dense { rows, cols, data }, None) => {
                Elem::Dense(*rows, *cols, data.as_slice())
            }
            (other, None) => {
                return Err(format!("element-wise operation on a {}", other.describe()))
            }
        });
    }
    if elems.iter().all(|e| matches!(e, Elem::Scalar(_))) {
        let args: Vec<f64> = elems.iter().map(|e| e.get(0, 0)).collect();
        return Ok(RefValue::Scalar(f(&args)));
    }
    let (mut rows, mut cols) = (1, 1);
    for e in &elems {
        if let Elem::Dense(r, c, _) = e {
            rows = broadcast(rows, *r)
                .ok_or_else(|| format!("element-wise rows {rows} against {r}"))?;
            cols = broadcast(cols, *c)
                .ok_or_else(|| format!("element-wise columns {cols} against {c}"))?;
        }
    }
    let mut out = Mat::zeros(rows, cols);
    let mut args = vec![0.0; elems.len()];
    for i in 0..rows {
        for j in 0..cols {
            for (a, e) in args.iter_mut().zip(&elems) {
                *a = e.get(i, j);
            }
            out.set(i, j, f(&args));
        }
    }
    Ok(out.into_value())
}

/// Reduces each row (`along_rows`) or each column of `m`.
fn reduce(m: &Mat, r: Reduce, along_rows: bool) -> RefValue {
    let (outer, inner) = if along_rows {
        (m.rows, m.cols)
    } else {
        (m.cols, m.rows)
    };
    let get = |o: usize, i: usize| if along_rows { m.at(o, i) } else { m.at(i, o) };
    let mut out = Vec::with_capacity(outer);
    let mut arg = Vec::with_capacity(outer);
    for o in 0..outer {
        match r {
            Reduce::Sum => {
                let mut s = 0.0;
                for i in 0..inner {
                    s += get(o, i);
                }
                out.push(s);
            }
            Reduce::Min | Reduce::Max | Reduce::ArgMin => {
                let mut best = get(o, 0);
                let mut best_at = 0usize;
                for i in 1..inner {
                    let v = get(o, i);
                    let better = match r {
                        Reduce::Max => v > best,
                        _ => v < best,
                    };
                    if better {
                        best = v;
                        best_at = i;
                    }
                }
                out.push(best);
                arg.push(best_at as u32);
            }
        }
    }
    match (r, along_rows) {
        (Reduce::ArgMin, _) => RefValue::Index(arg),
        (_, true) => RefValue::dense(outer, 1, out),
        (_, false) => RefValue::dense(1, outer, out),
    }
}

/// The concrete size of a dimension.
fn size(d: &Dim, dims: &BTreeMap<String, usize>) -> Result<usize, String> {
    d.resolve(dims)
        .ok_or_else(|| format!("dimension `{d}` has no size; pass it in `dims`"))
}

/// Checks that `v` has the storage and concrete shape of `ty`.
fn check_type(
    v: &RefValue,
    ty: &Type,
    dims: &BTreeMap<String, usize>,
    what: &str,
) -> Result<(), String> {
    let (rows, cols) = (size(&ty.shape.rows, dims)?, size(&ty.shape.cols, dims)?);
    let ok = match (ty.storage, v) {
        (Storage::Scalar, RefValue::Scalar(_)) => true,
        (
            Storage::Dense,
            RefValue::Dense {
                rows: r,
                cols: c,
                data,
            },
        ) => *r == rows && *c == cols && data.len() == r * c,
        (
            Storage::Csr,
            RefValue::Csr {
                rows: r,
                cols: c,
                row_ptr,
                col_idx,
                values,
            },
        ) => *r == rows && *c == cols && check_csr(*r, *c, row_ptr, col_idx, values).is_ok(),
        (Storage::Index, RefValue::Index(v)) => v.len() == rows,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} is declared {ty} ({rows} x {cols}) but is a {}",
            v.describe()
        ))
    }
}

/// Binds symbolic dimensions from the inputs' shapes where `dims` does not give them.
fn bind_dims(
    program: &Program,
    inputs: &BTreeMap<String, RefValue>,
    dims: &BTreeMap<String, usize>,
) -> Result<BTreeMap<String, usize>, String> {
    let mut out = dims.clone();
    for p in &program.params {
        let Some(v) = inputs.get(&p.name) else {
            continue;
        };
        let (rows, cols) = match v {
            RefValue::Dense { rows, cols, .. } | RefValue::Csr { rows, cols, .. } => (*rows, *cols),
            RefValue::Index(v) => (v.len(), 1),
            RefValue::Scalar(_) => continue,
        };
        for (d, value) in [(&p.ty.shape.rows, rows), (&p.ty.shape.cols, cols)] {
            if let Dim::Sym(s) = d {
                match out.get(s) {
                    Some(prev) if *prev != value => {
                        return Err(format!(
                            "dimension `{s}` is {prev} but `{}` has it {value}",
                            p.name
                        ))
                    }
                    _ => {
                        out.insert(s.clone(), value);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Evaluates `program` on `inputs` (tensor parameters by name), `scalars` (scalar parameters)
/// and `dims` (sizes of dimensions no input determines; the others are read from the inputs).
///
/// Returns every output by name. An output declared `Scalar` is returned as
/// [`RefValue::Scalar`] even when the graph computes it as a dense `1 x 1`.
pub fn evaluate(
    program: &Program,
    inputs: &BTreeMap<String, RefValue>,
    scalars: &BTreeMap<String, f64>,
    dims: &BTreeMap<String, usize>,
) -> Result<BTreeMap<String, RefValue>, String> {
    let dims = bind_dims(program, inputs, dims)?;
    let graph = &program.graph;
    let mut values: HashMap<NodeId, RefValue> = HashMap::new();
    for n in graph.topo_order() {
        let node = graph.node(n);
        let operand_ids = graph.operands(n);
        let mut ops: Vec<&RefValue> = Vec::with_capacity(operand_ids.len());
        for o in &operand_ids {
            ops.push(values.get(o).ok_or_else(|| {
                format!("operand %{} of %{} was not evaluated", o.index(), n.index())
            })?);
        }
        let value = eval_node(&node.op, &ops, inputs, scalars, &dims)
            .map_err(|e| format!("{}: {e}", graph.describe(n)))?;
        check_type(&value, &node.ty, &dims, &graph.describe(n))?;
        values.insert(n, value);
    }
    let mut out = BTreeMap::new();
    for (name, n) in &graph.outputs {
        let v = values
            .get(n)
            .ok_or_else(|| format!("output `{name}` was not evaluated"))?
            .clone();
        let declared_scalar = program
            .outputs
            .iter()
            .any(|o| &o.name == name && o.ty.is_scalar());
        let v = match v {
            RefValue::Dense {
                rows: 1,
                cols: 1,
                data,
            } if declared_scalar => RefValue::Scalar(data[0]),
            other => other,
        };
        out.insert(name.clone(), v);
    }
    Ok(out)
}

fn scalar_of(
    e: &ScalarExpr,
    scalars: &BTreeMap<String, f64>,
    dims: &BTreeMap<String, usize>,
) -> Result<f64, String> {
    e.eval(scalars, dims).map_err(|e| e.to_string())
}

/// Evaluates one operation on evaluated operands.
fn eval_node(
    op: &Op,
    ops: &[&RefValue],
    inputs: &BTreeMap<String, RefValue>,
    scalars: &BTreeMap<String, f64>,
    dims: &BTreeMap<String, usize>,
) -> Result<RefValue, String> {
    let arity = |n: usize| {
        if ops.len() == n {
            Ok(())
        } else {
            Err(format!("expected {n} operand(s), found {}", ops.len()))
        }
    };
    match op {
        Op::Input { param } => {
            arity(0)?;
            inputs
                .get(param)
                .cloned()
                .ok_or_else(|| format!("no value for input `{param}`"))
        }
        Op::Scalar(e) => {
            arity(0)?;
            Ok(RefValue::Scalar(scalar_of(e, scalars, dims)?))
        }
        Op::Transpose => {
            arity(1)?;
            match ops[0] {
                RefValue::Scalar(v) => Ok(RefValue::Scalar(*v)),
                RefValue::Dense { .. } => Ok(densify(ops[0])?.transposed().into_value()),
                RefValue::Csr { .. } => Ok(sparsify(&densify(ops[0])?.transposed())),
                RefValue::Index(_) => Err("an index vector cannot be transposed".into()),
            }
        }
        Op::MatMul => {
            arity(2)?;
            Ok(matmul(&densify(ops[0])?, &densify(ops[1])?, false, false, 1.0)?.into_value())
        }
        Op::Product(p) | Op::Contraction(p) => {
            arity(2)?;
            let alpha = scalar_of(&p.alpha, scalars, dims)?;
            Ok(matmul(
                &densify(ops[0])?,
                &densify(ops[1])?,
                p.trans_a,
                p.trans_b,
                alpha,
            )?
            .into_value())
        }
        Op::Library(lib) => lib.eval(ops, scalars, dims),
        Op::Unary(u) => {
            arity(1)?;
            elementwise(ops, |x| u.apply(x[0]))
        }
        Op::Binary(b) => {
            arity(2)?;
            // A CSR matrix scaled by a host scalar stays CSR.
            match (ops[0], ops[1]) {
                (
                    RefValue::Csr {
                        rows,
                        cols,
                        row_ptr,
                        col_idx,
                        values,
                    },
                    RefValue::Scalar(s),
                ) => {
                    let values = values.iter().map(|v| b.apply(*v, *s)).collect();
                    Ok(RefValue::Csr {
                        rows: *rows,
                        cols: *cols,
                        row_ptr: row_ptr.clone(),
                        col_idx: col_idx.clone(),
                        values,
                    })
                }
                (
                    RefValue::Scalar(s),
                    RefValue::Csr {
                        rows,
                        cols,
                        row_ptr,
                        col_idx,
                        values,
                    },
                ) => {
                    let values = values.iter().map(|v| b.apply(*s, *v)).collect();
                    Ok(RefValue::Csr {
                        rows: *rows,
                        cols: *cols,
                        row_ptr: row_ptr.clone(),
                        col_idx: col_idx.clone(),
                        values,
                    })
                }
                _ => elementwise(ops, |x| b.apply(x[0], x[1])),
            }
        }
        Op::Select => {
            arity(3)?;
            elementwise(ops, |x| if x[0] != 0.0 { x[1] } else { x[2] })
        }
        Op::RowReduce(r) => {
            arity(1)?;
            Ok(reduce(&densify(ops[0])?, *r, true))
        }
        Op::ColReduce(r) => {
            arity(1)?;
            Ok(reduce(&densify(ops[0])?, *r, false))
        }
        Op::Gather => {
            arity(2)?;
            let m = densify(ops[0])?;
            let idx = ops[1].as_index("gather")?;
            if idx.len() != m.rows {
                return Err(format!("gather: {} indices for {} rows", idx.len(), m.rows));
            }
            let mut z = Vec::with_capacity(m.rows);
            for (i, &c) in idx.iter().enumerate() {
                let c = c as usize;
                if c >= m.cols {
                    return Err(format!(
                        "gather: index {c} at row {i} is not below {} columns",
                        m.cols
                    ));
                }
                z.push(m.at(i, c));
            }
            Ok(RefValue::dense(m.rows, 1, z))
        }
        Op::Builtin(b) => b.eval(ops, dims),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        src: &str,
        inputs: &[(&str, RefValue)],
        scalars: &[(&str, f64)],
        dims: &[(&str, usize)],
    ) -> BTreeMap<String, RefValue> {
        let p = Program::parse(src).unwrap_or_else(|e| panic!("{e:?}"));
        let inputs = inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let scalars = scalars.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        evaluate(&p, &inputs, &scalars, &dims).unwrap_or_else(|e| panic!("{e}"))
    }

    fn dense_of(v: &RefValue) -> (usize, usize, Vec<f64>) {
        match v {
            RefValue::Dense { rows, cols, data } => (*rows, *cols, data.clone()),
            other => panic!("expected dense, got {other:?}"),
        }
    }

    #[test]
    fn product_and_broadcast_by_hand() {
        // X = [[1, 2], [3, 4], [5, 6]]; X X^T = [[5, 11, 17], [11, 25, 39], [17, 39, 61]].
        let x = RefValue::dense(3, 2, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let out = run(
            "fn f(X: Dense[n, d], a: Scalar) -> (B: Dense[n, n], C: Dense[n, d]) { B = X * X^T; C = a * X + sum_cols(X) - diag(B); }",
            &[("X", x)],
            &[("a", 2.0)],
            &[],
        );
        assert_eq!(
            dense_of(&out["B"]),
            (
                3,
                3,
                vec![5.0, 11.0, 17.0, 11.0, 25.0, 39.0, 17.0, 39.0, 61.0]
            )
        );
        // sum_cols(X) = [9, 12]; diag(B) = [5, 25, 61].
        let want = vec![
            2.0 + 9.0 - 5.0,
            4.0 + 12.0 - 5.0,
            6.0 + 9.0 - 25.0,
            8.0 + 12.0 - 25.0,
            10.0 + 9.0 - 61.0,
            12.0 + 12.0 - 61.0,
        ];
        assert_eq!(dense_of(&out["C"]), (3, 2, want));
    }

    #[test]
    fn csr_products_and_scaling() {
        // S = [[1, 0, 2], [0, 3, 0]] (2 x 3); x = [1, 1, 1]; S x = [3, 3]; 2 S^T [1, 1]^T = [2, 6, 4].
        let s = RefValue::Csr {
            rows: 2,
            cols: 3,
            row_ptr: vec![0, 2, 3],
            col_idx: vec![0, 2, 1],
            values: vec![1.0, 2.0, 3.0],
        };
        let out = run(
            "fn f(S: Csr[m, n], x: Col[n], y: Col[m]) -> (a: Col[m], b: Col[n]) { a = S * x; b = 2 * S^T * y; }",
            &[("S", s), ("x", RefValue::dense(3, 1, vec![1.0; 3])), ("y", RefValue::dense(2, 1, vec![1.0; 2]))],
            &[],
            &[],
        );
        assert_eq!(dense_of(&out["a"]), (2, 1, vec![3.0, 3.0]));
        assert_eq!(dense_of(&out["b"]), (3, 1, vec![2.0, 6.0, 4.0]));
    }

    #[test]
    fn reductions_ties_and_clusters() {
        // Row 0 ties between columns 0 and 2: argmin is 0. Row 1's minimum is at column 1.
        let d = RefValue::dense(2, 3, vec![1.0, 2.0, 1.0, 5.0, -1.0, 0.0]);
        let out = run(
            "fn f(D: Dense[n, k], l: Index[n]) -> (a: Index[n], m: Col[n], x: Row[k], g: Col[n], c: Col[k], s: Scalar, v: Col[k]) {
                a = argmin_rows(D); m = min_rows(D); x = max_cols(D); g = gather(D, l); c = counts(l, k); s = sum(D);
                V = selection(l, k); v = V * g;
            }",
            &[("D", d), ("l", RefValue::Index(vec![2, 2]))],
            &[],
            &[],
        );
        assert_eq!(out["a"], RefValue::Index(vec![0, 1]));
        assert_eq!(dense_of(&out["m"]).2, vec![1.0, -1.0]);
        assert_eq!(dense_of(&out["x"]), (1, 3, vec![5.0, 2.0, 1.0]));
        assert_eq!(dense_of(&out["g"]).2, vec![1.0, 0.0]);
        assert_eq!(dense_of(&out["c"]).2, vec![0.0, 0.0, 2.0]);
        assert_eq!(out["s"], RefValue::Scalar(8.0));
        // Cluster 2 holds both points: its mean of g is 0.5; empty clusters give 0.
        assert_eq!(dense_of(&out["v"]).2, vec![0.0, 0.0, 0.5]);
    }

    #[test]
    fn select_and_scalar_outputs() {
        let out = run(
            "fn f(x: Col[n], a: Scalar) -> (y: Col[n], b: Scalar) { y = where(x > 0, x, inf); b = a * n + 1; }",
            &[("x", RefValue::dense(3, 1, vec![1.0, -2.0, 0.0]))],
            &[("a", 0.5)],
            &[],
        );
        assert_eq!(
            dense_of(&out["y"]).2,
            vec![1.0, f64::INFINITY, f64::INFINITY]
        );
        assert_eq!(out["b"], RefValue::Scalar(2.5));
    }

    #[test]
    fn errors_name_the_problem() {
        let p = Program::parse("fn f(l: Index[n]) -> (c: Col[k]) { c = counts(l, k); }").unwrap();
        let inputs = BTreeMap::from([("l".to_string(), RefValue::Index(vec![0, 3]))]);
        let dims = BTreeMap::from([("k".to_string(), 2)]);
        let err = evaluate(&p, &inputs, &BTreeMap::new(), &dims).unwrap_err();
        assert!(err.contains("label 3"), "{err}");
        let err = evaluate(&p, &inputs, &BTreeMap::new(), &BTreeMap::new()).unwrap_err();
        assert!(err.contains("`k`"), "{err}");
        let err = evaluate(&p, &BTreeMap::new(), &BTreeMap::new(), &dims).unwrap_err();
        assert!(err.contains("`l`"), "{err}");
    }
}
