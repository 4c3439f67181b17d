//! Typing rules: the result type of each operation from its operands' types. Used by the
//! checker (which attaches errors to source tokens) and by the inference pass (which re-checks
//! graphs built or rewritten in code).

use crate::ir::{Op, Reduce};
use crate::ops::OpFacts;
use crate::types::{require_dense, require_index, Dim, Storage, Type, TypeError};

/// Broadcasts two dimensions: equal ones, or a literal 1 against anything.
fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    if a == b {
        Some(a.clone())
    } else if a.is_one() {
        Some(b.clone())
    } else if b.is_one() {
        Some(a.clone())
    } else {
        None
    }
}

/// Checks that an operand may take part in element-wise arithmetic.
fn elementwise_operand(t: &Type, pos: usize, what: &str) -> Result<(), TypeError> {
    match t.storage {
        Storage::Dense | Storage::Scalar => Ok(()),
        Storage::Csr => Err(TypeError::new(format!(
            "{what} is not defined on a CSR matrix ({t})"
        ))
        .at(pos)
        .help("element-wise operations need dense operands; sparse matrices can be scaled and multiplied")),
        Storage::Index => Err(TypeError::new(format!(
            "an index vector ({t}) cannot be used in arithmetic"
        ))
        .at(pos)
        .help("index vectors hold labels; use gather(M, idx), counts(idx, k), selection(idx, k), or compare them (`a != b`)")),
    }
}

/// The type of an element-wise operation over `operands` (two or three), with broadcasting.
pub fn elementwise_type(operands: &[&Type], what: &str) -> Result<Type, TypeError> {
    for (i, t) in operands.iter().enumerate() {
        elementwise_operand(t, i, what)?;
    }
    if operands.iter().all(|t| t.is_scalar()) {
        return Ok(Type::scalar());
    }
    let mut rows = Dim::ONE;
    let mut cols = Dim::ONE;
    for t in operands.iter().filter(|t| !t.is_scalar()) {
        rows = broadcast_dim(&rows, &t.shape.rows).ok_or_else(|| {
            TypeError::new(format!(
                "shape mismatch in {what}: {} rows against {} rows ({})",
                rows, t.shape.rows, describe_all(operands)
            ))
            .help("element-wise operands must have equal shapes, or be vectors or scalars that broadcast (Col[n] along columns, Row[k] along rows)")
        })?;
        cols = broadcast_dim(&cols, &t.shape.cols).ok_or_else(|| {
            TypeError::new(format!(
                "shape mismatch in {what}: {} columns against {} columns ({})",
                cols, t.shape.cols, describe_all(operands)
            ))
            .help("element-wise operands must have equal shapes, or be vectors or scalars that broadcast (Col[n] along columns, Row[k] along rows)")
        })?;
    }
    Ok(Type::dense(rows, cols))
}

fn describe_all(operands: &[&Type]) -> String {
    operands
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The type of a matrix product `a * b` (neither a scalar).
pub fn product_type(a: &Type, b: &Type, trans_a: bool, trans_b: bool) -> Result<Type, TypeError> {
    for (pos, t) in [a, b].into_iter().enumerate() {
        if t.storage == Storage::Index {
            return Err(
                TypeError::new(format!("an index vector ({t}) cannot be multiplied"))
                    .at(pos)
                    .help("to build the selection matrix from labels use selection(labels, k)"),
            );
        }
    }
    // Two CSR operands type as a dense product; the planner takes `A * B^T` (a Gram or cross
    // kernel matrix) and reports the other forms as unsupported.
    let sa = if trans_a {
        a.shape.transposed()
    } else {
        a.shape.clone()
    };
    let sb = if trans_b {
        b.shape.transposed()
    } else {
        b.shape.clone()
    };
    if sa.cols != sb.rows {
        let mut err = TypeError::new(format!(
            "dimension mismatch in `*`: the left operand is {} x {}, the right is {} x {}; inner dimensions {} and {} differ",
            sa.rows, sa.cols, sb.rows, sb.cols, sa.cols, sb.rows
        ));
        if sa.cols == sb.cols {
            err = err.help("did you mean to transpose the right operand (`^T`)?");
        } else if sa.rows == sb.rows {
            err = err.help("did you mean to transpose the left operand (`^T`)?");
        }
        return Err(err);
    }
    Ok(Type::dense(sa.rows, sb.cols))
}

/// The result type of `op` applied to operands of types `operands`.
pub fn result_type(op: &Op, operands: &[&Type]) -> Result<Type, TypeError> {
    let arity = |n: usize| -> Result<(), TypeError> {
        if operands.len() == n {
            Ok(())
        } else {
            Err(TypeError::new(format!(
                "{} takes {n} operand(s), found {}",
                op.label(),
                operands.len()
            )))
        }
    };
    match op {
        Op::Input { .. } => Err(TypeError::new("inputs take their type from the signature")),
        Op::Scalar(_) => {
            arity(0)?;
            Ok(Type::scalar())
        }
        Op::Transpose => {
            arity(1)?;
            let t = operands[0];
            match t.storage {
                Storage::Index => {
                    Err(TypeError::new(format!("an index vector ({t}) cannot be transposed")).at(0))
                }
                Storage::Scalar => Ok(t.clone()),
                _ => Ok(Type {
                    storage: t.storage,
                    shape: t.shape.transposed(),
                }),
            }
        }
        Op::MatMul => {
            arity(2)?;
            product_type(operands[0], operands[1], false, false)
        }
        Op::Product(p) | Op::Contraction(p) => {
            arity(2)?;
            product_type(operands[0], operands[1], p.trans_a, p.trans_b)
        }
        // A library node keeps the type of the product it replaced (a row-vector result
        // computed as a column vector has the same data), so it has no rule of its own.
        Op::Library(_) => Err(TypeError::new(
            "library operations keep the type of the product they replaced",
        )),
        Op::Unary(u) => {
            arity(1)?;
            elementwise_type(operands, u.name())
        }
        Op::Binary(b) => {
            arity(2)?;
            // Scaling a CSR matrix by a host scalar is allowed; it folds into a product's alpha.
            if matches!(b, kernel_ir::BinaryOp::Mul | kernel_ir::BinaryOp::Div) {
                let (x, y) = (operands[0], operands[1]);
                if x.storage == Storage::Csr && y.is_scalar() {
                    return Ok(x.clone());
                }
                if *b == kernel_ir::BinaryOp::Mul && y.storage == Storage::Csr && x.is_scalar() {
                    return Ok(y.clone());
                }
            }
            // Comparisons may compare index vectors (labels) with each other or with numbers:
            // `changed = sum(new_labels != labels)`. The result is a dense 0/1 vector.
            let comparison = matches!(
                b,
                kernel_ir::BinaryOp::Lt
                    | kernel_ir::BinaryOp::Le
                    | kernel_ir::BinaryOp::Gt
                    | kernel_ir::BinaryOp::Ge
                    | kernel_ir::BinaryOp::Eq
                    | kernel_ir::BinaryOp::Ne
            );
            if comparison && operands.iter().any(|t| t.storage == Storage::Index) {
                let as_values: Vec<Type> = operands
                    .iter()
                    .map(|t| match t.storage {
                        Storage::Index => Type::col(t.shape.rows.clone()),
                        _ => (*t).clone(),
                    })
                    .collect();
                let refs: Vec<&Type> = as_values.iter().collect();
                return elementwise_type(&refs, &format!("`{}`", b.symbol()));
            }
            elementwise_type(operands, &format!("`{}`", b.symbol()))
        }
        Op::Select => {
            arity(3)?;
            elementwise_type(operands, "where")
        }
        Op::RowReduce(r) => {
            arity(1)?;
            let t = operands[0];
            require_dense(t, 0, &format!("{}_rows", r.name()))?;
            Ok(match r {
                Reduce::ArgMin => Type::index(t.shape.rows.clone()),
                _ => Type::col(t.shape.rows.clone()),
            })
        }
        Op::ColReduce(r) => {
            arity(1)?;
            let t = operands[0];
            require_dense(t, 0, &format!("{}_cols", r.name()))?;
            if *r == Reduce::ArgMin {
                return Err(TypeError::new(
                    "argmin over columns is not supported; transpose and use argmin_rows",
                ));
            }
            Ok(Type::row(t.shape.cols.clone()))
        }
        Op::Gather => {
            arity(2)?;
            let (m, idx) = (operands[0], operands[1]);
            require_dense(m, 0, "gather")?;
            require_index(idx, 1, "gather")?;
            if idx.shape.rows != m.shape.rows {
                return Err(TypeError::new(format!(
                    "gather(M, idx) needs one index per row of M: M is {m} ({} rows), idx is {idx}",
                    m.shape.rows
                ))
                .at(1));
            }
            Ok(Type::col(m.shape.rows.clone()))
        }
        Op::Builtin(b) => b.result_type(operands),
    }
}
