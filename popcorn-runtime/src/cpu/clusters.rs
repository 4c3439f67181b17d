//! Cluster bookkeeping from a label vector: cluster sizes and the normalised selection matrix.

use super::error::{check_vector, CpuError};
use super::real::Real;

/// Checks that every label is `< k`; reports the first offending position.
fn check_labels(labels: &[u32], k: usize) -> Result<(), CpuError> {
    match labels.iter().position(|&l| l as usize >= k) {
        Some(position) => Err(CpuError::LabelOutOfRange {
            position,
            label: labels[position],
            k,
        }),
        None => Ok(()),
    }
}

/// Number of points per cluster as a count per label: `out[c] = |{i : labels[i] == c}|` for
/// `c < k`. `out` needs at least `k` elements (extra ones are left alone).
///
/// # Errors
/// [`CpuError::LabelOutOfRange`] naming the first label `>= k` (nothing is written);
/// [`CpuError::Shape`] if `out` is shorter than `k`.
pub fn counts<T: Real>(labels: &[u32], k: usize, out: &mut [T]) -> Result<(), CpuError> {
    check_vector("out", out.len(), k)?;
    check_labels(labels, k)?;
    let mut tally = vec![0usize; k];
    for &l in labels {
        tally[l as usize] += 1;
    }
    for (o, &t) in out[..k].iter_mut().zip(&tally) {
        *o = T::from_f64(t as f64);
    }
    Ok(())
}

/// Builds the normalised selection matrix `V` (`k x n`, `n = labels.len()`) in CSR form:
/// `V[c, i] = 1 / |c|` where `labels[i] == c`, zero elsewhere. Row `c` lists the points of
/// cluster `c` with column indices ascending; an empty cluster has an empty row.
///
/// `row_ptr` needs at least `k + 1` entries, `col_idx` and `values` at least `n` (extra entries
/// are left alone).
///
/// # Errors
/// [`CpuError::LabelOutOfRange`] naming the first label `>= k`; [`CpuError::Shape`] naming a
/// short output; [`CpuError::TooLarge`] if `n` does not fit an `i32` index.
pub fn selection<T: Real>(
    labels: &[u32],
    k: usize,
    row_ptr: &mut [i32],
    col_idx: &mut [i32],
    values: &mut [T],
) -> Result<(), CpuError> {
    let n = labels.len();
    if n > i32::MAX as usize {
        return Err(CpuError::TooLarge {
            what: "the number of points".to_string(),
            value: n,
            limit: i32::MAX as usize,
        });
    }
    check_vector("row_ptr", row_ptr.len(), k.saturating_add(1))?;
    check_vector("col_idx", col_idx.len(), n)?;
    check_vector("values", values.len(), n)?;
    check_labels(labels, k)?;
    let row_ptr = &mut row_ptr[..k + 1];
    row_ptr.fill(0);
    for &l in labels {
        row_ptr[l as usize + 1] += 1;
    }
    for c in 0..k {
        row_ptr[c + 1] += row_ptr[c];
    }
    let mut cursor: Vec<i32> = row_ptr[..k].to_vec();
    for (i, &l) in labels.iter().enumerate() {
        let c = l as usize;
        let slot = cursor[c] as usize;
        col_idx[slot] = i as i32;
        let size = row_ptr[c + 1] - row_ptr[c];
        values[slot] = T::one() / T::from_f64(f64::from(size));
        cursor[c] += 1;
    }
    Ok(())
}

/// Sums of each row of `m` (`rows x cols`, leading dimension `ldm`) by the label of the column:
/// `out[i * k + c] = sum over j with labels[j] == c of m[i * ldm + j]` (`out` is `rows x k`).
/// Rows are independent and summed left to right, so the result does not depend on the
/// thread count.
///
/// # Errors
/// [`CpuError::LabelOutOfRange`] for a label `>= k` (before anything is written);
/// [`CpuError::Shape`] for slices too short.
#[allow(clippy::too_many_arguments)]
pub fn cluster_sums<T: Real>(
    rows: usize,
    cols: usize,
    m: &[T],
    ldm: usize,
    labels: &[u32],
    k: usize,
    out: &mut [T],
) -> Result<(), CpuError> {
    use rayon::prelude::*;
    if labels.len() < cols {
        return Err(CpuError::Shape {
            operand: "labels".into(),
            detail: format!("{} labels for {cols} columns", labels.len()),
        });
    }
    if let Some(p) = labels[..cols].iter().position(|l| *l as usize >= k) {
        return Err(CpuError::LabelOutOfRange {
            position: p,
            label: labels[p],
            k,
        });
    }
    if rows > 0 && (ldm < cols || m.len() < (rows - 1) * ldm + cols) {
        return Err(CpuError::Shape {
            operand: "M".into(),
            detail: format!("{} values for {rows} x {cols} with ld {ldm}", m.len()),
        });
    }
    if out.len() < rows * k {
        return Err(CpuError::Shape {
            operand: "S".into(),
            detail: format!("{} values for {rows} x {k}", out.len()),
        });
    }
    let labels = &labels[..cols];
    if k == 0 {
        return Ok(());
    }
    // Rows go ROWS at a time: each label is read once for the group, and the group's bins
    // take independent additions (one row's additions to one bin would otherwise wait on each
    // other when neighbouring columns share a label). Each row still adds its values to its
    // bins in column order, so the sums are those of a row alone.
    const ROWS: usize = 4;
    out[..rows * k]
        .par_chunks_mut(ROWS * k)
        .enumerate()
        .for_each(|(g, acc)| {
            acc.iter_mut().for_each(|a| *a = T::zero());
            let i0 = g * ROWS;
            let row = |r: usize| &m[(i0 + r) * ldm..(i0 + r) * ldm + cols];
            if acc.len() == ROWS * k {
                let (a01, a23) = acc.split_at_mut(2 * k);
                let (a0, a1) = a01.split_at_mut(k);
                let (a2, a3) = a23.split_at_mut(k);
                let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                for (j, l) in labels.iter().enumerate() {
                    let l = *l as usize;
                    a0[l] += r0[j];
                    a1[l] += r1[j];
                    a2[l] += r2[j];
                    a3[l] += r3[j];
                }
            } else {
                for (r, a) in acc.chunks_mut(k).enumerate() {
                    for (v, l) in row(r).iter().zip(labels) {
                        a[*l as usize] += *v;
                    }
                }
            }
        });
    Ok(())
}

/// Rows permuted by a selection matrix's order, forward (rows by cluster) or back.
///
/// `m` and `out` hold `rows` rows of `width` values each. `listed` are the points the
/// selection lists, cluster by cluster (its column indices `col_idx[..nnz]`, each point at most
/// once); the order is those, then the points it does not list, ascending, a permutation of
/// `0..rows`. Forward: row `p` of `out` is row `order[p]` of `m`; inverse: row `order[p]` of
/// `out` is row `p` of `m` (the inverse of the forward result is `m` again).
///
/// # Errors
/// [`CpuError::Shape`] if `m` or `out` does not hold `rows * width` values;
/// [`CpuError::InvalidCsr`] for a listed point `>= rows` or listed twice (nothing is written).
pub fn permute_rows<V: Copy + Send + Sync>(
    listed: &[i32],
    rows: usize,
    m: &[V],
    width: usize,
    out: &mut [V],
    inverse: bool,
) -> Result<(), CpuError> {
    let len = rows.checked_mul(width).ok_or_else(|| CpuError::Shape {
        operand: "M".into(),
        detail: format!("{rows} x {width} overflows"),
    })?;
    if m.len() != len || out.len() != len {
        return Err(CpuError::Shape {
            operand: "out".into(),
            detail: format!(
                "{rows} rows of {width} from {} values into {}",
                m.len(),
                out.len()
            ),
        });
    }
    let mut seen = vec![false; rows];
    let mut order = Vec::with_capacity(rows);
    for &i in listed {
        let p = usize::try_from(i)
            .ok()
            .filter(|p| *p < rows)
            .ok_or_else(|| CpuError::InvalidCsr {
                operand: "selection".into(),
                detail: format!("point {i} of {rows}"),
            })?;
        if std::mem::replace(&mut seen[p], true) {
            return Err(CpuError::InvalidCsr {
                operand: "selection".into(),
                detail: format!("point {i} is listed twice"),
            });
        }
        order.push(p);
    }
    order.extend((0..rows).filter(|p| !seen[*p]));
    if width == 0 {
        return Ok(());
    }
    for (p, &i) in order.iter().enumerate() {
        let (to, from) = if inverse { (i, p) } else { (p, i) };
        out[to * width..(to + 1) * width].copy_from_slice(&m[from * width..(from + 1) * width]);
    }
    Ok(())
}
