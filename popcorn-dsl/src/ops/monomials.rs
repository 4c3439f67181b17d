//! `monomials(X, a, b, c)`: products of two columns of `[X, 1]` scaled, one a result column,
//! the explicit features of a polynomial kernel of degree 1 or 2 (`x_a x_b`, `x_a`, `1`):
//! `Y[i, j] = c[j] Xe[i, a[j]] Xe[i, b[j]]` with `Xe = [X, 1]` (index `d`, one past `X`'s
//! last column, picks the column of ones). One pass writing `Y`, against two products with
//! one-hot selection matrices and a map.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, require_index, DimBindings, Type, TypeError};
use crate::value::{densify, Mat, RefValue};
use serde::{Deserialize, Serialize};

/// `monomials(X, a, b, c)` (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Monomials;

impl OpFacts for Monomials {
    fn label(&self) -> String {
        "monomials".into()
    }

    fn step_name(&self) -> &'static str {
        "monomials"
    }

    fn details(&self) -> String {
        String::new()
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 4, "monomials")?;
        let (x, a, b, c) = (operands[0], operands[1], operands[2], operands[3]);
        require_dense(x, 0, "monomials")?;
        require_index(a, 1, "monomials")?;
        require_index(b, 2, "monomials")?;
        require_dense(c, 3, "monomials")?;
        let f = &a.shape.rows;
        for (pos, t) in [(2, b), (3, c)] {
            if &t.shape.rows != f || !t.shape.cols.is_one() {
                return Err(TypeError::new(format!(
                    "monomials(X, a, b, c) needs a, b and c of one length (a column each): a \
                     is {a}, operand {} is {t}",
                    pos + 1
                ))
                .at(pos));
            }
        }
        Ok(Type::dense(x.shape.rows.clone(), f.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let x = inputs.first().map_or(0.0, Extent::elems);
        let terms = inputs.get(3).map_or(0.0, Extent::elems);
        let y = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: 2.0 * y,
            bytes: elem * (x + terms + y) + 8.0 * terms,
        }
    }

    fn eval(&self, operands: &[&RefValue], _dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 4, "monomials")?;
        let x = densify(operands[0])?;
        let a = operands[1].as_index("monomials' first columns")?;
        let b = operands[2].as_index("monomials' second columns")?;
        let c = densify(operands[3])?;
        if b.len() != a.len() || c.rows * c.cols != a.len() {
            return Err(format!(
                "monomials: {} first columns, {} second columns and {} coefficients",
                a.len(),
                b.len(),
                c.rows * c.cols
            ));
        }
        let pick = |i: usize, col: u32| -> Result<f64, String> {
            match col as usize {
                j if j < x.cols => Ok(x.at(i, j)),
                j if j == x.cols => Ok(1.0),
                j => Err(format!(
                    "monomials: column {j} of a matrix of {} columns (and the ones at {})",
                    x.cols, x.cols
                )),
            }
        };
        let mut y = Mat::zeros(x.rows, a.len());
        for i in 0..x.rows {
            for j in 0..a.len() {
                y.set(i, j, c.data[j] * pick(i, a[j])? * pick(i, b[j])?);
            }
        }
        Ok(y.into_value())
    }
}
