//! Cluster bookkeeping from a label vector: cluster sizes and the normalised selection matrix
//! (plain or weighted).

use super::by_label_simd;
use super::error::{check_vector, CpuError};
use super::real::Real;
use kernel_ir::ScalarType;

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

/// Weighs a selection matrix that [`selection`] built: each row `c`'s values become
/// `weights[i] / W_c` for its points `i`, `W_c` the sum of their weights (added in the row's
/// order, ascending points, in f64), or 0 where `W_c` is 0 (the row keeps its entries).
/// `row_ptr` holds `k + 1` offsets, `col_idx` and `values` the entries; `weights` one weight
/// per column of the matrix.
///
/// # Errors
/// [`CpuError::Shape`] naming a short slice or an entry's column beyond the weights.
pub fn weigh_selection<T: Real>(
    k: usize,
    row_ptr: &[i32],
    col_idx: &[i32],
    weights: &[T],
    values: &mut [T],
) -> Result<(), CpuError> {
    check_vector("row_ptr", row_ptr.len(), k.saturating_add(1))?;
    let nnz = usize::try_from(row_ptr[k]).unwrap_or(usize::MAX);
    check_vector("col_idx", col_idx.len(), nnz)?;
    check_vector("values", values.len(), nnz)?;
    let weight = |p: usize| -> Result<f64, CpuError> {
        usize::try_from(col_idx[p])
            .ok()
            .and_then(|i| weights.get(i))
            .map(|w| w.to_f64())
            .ok_or_else(|| CpuError::Shape {
                operand: "weights".into(),
                detail: format!(
                    "entry {p} is in column {} but there are {} weights",
                    col_idx[p],
                    weights.len()
                ),
            })
    };
    for c in 0..k {
        let (start, end) = (row_ptr[c].max(0) as usize, row_ptr[c + 1].max(0) as usize);
        if start > end || end > nnz {
            return Err(CpuError::Shape {
                operand: "row_ptr".into(),
                detail: format!("row {c} runs from {start} to {end} of {nnz} entries"),
            });
        }
        let mut total = 0.0;
        for p in start..end {
            total += weight(p)?;
        }
        for (p, v) in values[start..end].iter_mut().enumerate() {
            *v = T::from_f64(if total != 0.0 {
                weight(start + p)? / total
            } else {
                0.0
            });
        }
    }
    Ok(())
}

/// Checks that `m_len` values hold a `rows x cols` matrix of leading dimension `ldm`, and
/// `out_len` its `rows x k` sums.
pub(crate) fn check_sums_shapes(
    rows: usize,
    cols: usize,
    m_len: usize,
    ldm: usize,
    k: usize,
    out_len: usize,
) -> Result<(), CpuError> {
    if rows > 0 && (ldm < cols || m_len < (rows - 1) * ldm + cols) {
        return Err(CpuError::Shape {
            operand: "M".into(),
            detail: format!("{m_len} values for {rows} x {cols} with ld {ldm}"),
        });
    }
    if out_len < rows * k {
        return Err(CpuError::Shape {
            operand: "S".into(),
            detail: format!("{out_len} values for {rows} x {k}"),
        });
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
    // Checked once: the eight-row path takes the checked labels as they are.
    let checked =
        by_label_simd::Labels::new(&labels[..cols], k).map_err(|p| CpuError::LabelOutOfRange {
            position: p,
            label: labels[p],
            k,
        })?;
    check_sums_shapes(rows, cols, m.len(), ldm, k, out.len())?;
    let labels = checked.as_slice();
    if k == 0 {
        return Ok(());
    }
    // Rows go in groups: each label is read once for the group, and the group's bins take
    // independent additions (one row's additions to one bin would otherwise wait on each
    // other when neighbouring columns share a label). In f32 on a processor with AVX the
    // groups are of eight rows, transposed in registers (see `by_label_simd`); else of four.
    // Each row still adds its values to its bins in column order, so the sums are those of a
    // row alone.
    let simd = as_f32(m)
        .filter(|_| by_label_simd::available())
        .map(|m32| (m32, checked));
    let group = if simd.is_some() { 8 } else { 4 };
    out[..rows * k]
        .par_chunks_mut(group * k)
        .enumerate()
        .for_each_init(
            || vec![[0.0f32; 8]; if simd.is_some() { k } else { 0 }],
            |bins, (g, acc)| {
                let i0 = g * group;
                let n = acc.len() / k;
                if let (Some((m32, checked)), Some(acc32), 8) = (simd, as_f32_mut(acc), n) {
                    let row = |r: usize| &m32[(i0 + r) * ldm..(i0 + r) * ldm + cols];
                    let rows8 = std::array::from_fn(row);
                    bins.iter_mut().for_each(|b| *b = [0.0; 8]);
                    if by_label_simd::sum_eight_rows(rows8, checked, bins) {
                        for (r, a) in acc32.chunks_mut(k).enumerate() {
                            for (v, b) in a.iter_mut().zip(bins.iter()) {
                                *v = b[r];
                            }
                        }
                        return;
                    }
                }
                acc.iter_mut().for_each(|a| *a = T::zero());
                let row = |r: usize| &m[(i0 + r) * ldm..(i0 + r) * ldm + cols];
                let mut r = 0;
                for four in acc.chunks_exact_mut(4 * k) {
                    sum_four_rows(
                        [row(r), row(r + 1), row(r + 2), row(r + 3)],
                        labels,
                        four,
                        k,
                    );
                    r += 4;
                }
                for a in acc[r * k..].chunks_mut(k) {
                    for (v, l) in row(r).iter().zip(labels) {
                        a[*l as usize] += *v;
                    }
                    r += 1;
                }
            },
        );
    Ok(())
}

/// Rows of `x` (`n x d`, row-major, contiguous) summed by label: `out[c * d + f]` = the sum of
/// `x[i * d + f]` over the `i` with `labels[i] == c` (`out` is `k x d`; an empty cluster's row
/// is 0). The rows go in fixed blocks of consecutive points (their number depends on `n`, `k`
/// and `d` only), each summed in point order, and the blocks' sums are added in block order:
/// the result does not depend on the thread count.
///
/// # Errors
/// [`CpuError::LabelOutOfRange`] for a label `>= k` (before anything is written);
/// [`CpuError::Shape`] for slices too short.
pub fn label_row_sums<T: Real>(
    n: usize,
    d: usize,
    x: &[T],
    labels: &[u32],
    k: usize,
    out: &mut [T],
) -> Result<(), CpuError> {
    use rayon::prelude::*;
    check_vector("labels", labels.len(), n)?;
    check_vector("X", x.len(), n * d)?;
    check_vector("S", out.len(), k * d)?;
    let labels = &labels[..n];
    check_labels(labels, k)?;
    let out = &mut out[..k * d];
    out.iter_mut().for_each(|v| *v = T::zero());
    if n == 0 || k * d == 0 {
        return Ok(());
    }
    // Blocks of at least LABEL_ROW_BLOCK points, few enough that their partial sums stay
    // within LABEL_ROW_PARTIALS values.
    const LABEL_ROW_BLOCK: usize = 4096;
    const LABEL_ROW_PARTIALS: usize = 1 << 22;
    let blocks = n
        .div_ceil(LABEL_ROW_BLOCK)
        .min((LABEL_ROW_PARTIALS / (k * d)).max(1));
    let per_block = n.div_ceil(blocks);
    let partials: Vec<Vec<T>> = (0..blocks)
        .into_par_iter()
        .map(|b| {
            let mut s = vec![T::zero(); k * d];
            let rows = b * per_block..((b + 1) * per_block).min(n);
            for i in rows {
                let c = labels[i] as usize;
                for (acc, v) in s[c * d..(c + 1) * d].iter_mut().zip(&x[i * d..(i + 1) * d]) {
                    *acc += *v;
                }
            }
            s
        })
        .collect();
    for s in &partials {
        for (o, v) in out.iter_mut().zip(s) {
            *o += *v;
        }
    }
    Ok(())
}

/// Sums by label of four rows into `acc` (`4 x k`, zeroed), one label read per column for the
/// four.
fn sum_four_rows<T: Real>(rows: [&[T]; 4], labels: &[u32], acc: &mut [T], k: usize) {
    let (a01, a23) = acc.split_at_mut(2 * k);
    let (a0, a1) = a01.split_at_mut(k);
    let (a2, a3) = a23.split_at_mut(k);
    let [r0, r1, r2, r3] = rows;
    for (j, l) in labels.iter().enumerate() {
        let l = *l as usize;
        a0[l] += r0[j];
        a1[l] += r1[j];
        a2[l] += r2[j];
        a3[l] += r3[j];
    }
}

/// `s` as `f32` values when `T` is `f32`.
fn as_f32<T: Real>(s: &[T]) -> Option<&[f32]> {
    (T::SCALAR_TYPE == ScalarType::F32).then(|| {
        // SAFETY: Real is sealed to f32 and f64, and its f32 is the one whose SCALAR_TYPE is
        // F32: T is f32, so the slice is reinterpreted as itself.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) }
    })
}

/// `s` as mutable `f32` values when `T` is `f32`.
fn as_f32_mut<T: Real>(s: &mut [T]) -> Option<&mut [f32]> {
    (T::SCALAR_TYPE == ScalarType::F32).then(|| {
        // SAFETY: as in as_f32; the borrow of `s` is handed on whole.
        unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) }
    })
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
