//! Sparse points onto the device: a CSR matrix as the backends take it.

use super::error::FitError;
use crate::io::CsrMatrix;
use crate::{Context, Tensor};

/// Uploads a CSR matrix (its indices as the `i32` the backends take).
pub(crate) fn upload(ctx: &Context, x: &CsrMatrix) -> Result<Tensor, FitError> {
    let too_large = |what: &str, v: usize| {
        FitError::Input(format!(
            "sparse points: {what} {v} does not fit the 32-bit indices of the sparse products"
        ))
    };
    let row_ptr = x
        .row_ptr()
        .iter()
        .map(|&p| i32::try_from(p).map_err(|_| too_large("entry offset", p)))
        .collect::<Result<Vec<i32>, _>>()?;
    let col_idx = x
        .col_idx()
        .iter()
        .map(|&c| i32::try_from(c).map_err(|_| too_large("column", c)))
        .collect::<Result<Vec<i32>, _>>()?;
    Ok(ctx.csr(x.rows(), x.cols(), &row_ptr, &col_idx, x.values())?)
}
