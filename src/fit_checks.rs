//! Checks shared by the fits (Kernel K-means and normalized cut): the number of clusters, the
//! iteration and run counts, and given initial labels. `items` names what is clustered
//! (`points`, `nodes`) in the messages.

use crate::kkmeans::error::FitError;

/// `1 <= k <= n`, at least one iteration and one run.
pub(crate) fn check_runs(
    k: usize,
    n: usize,
    max_iter: usize,
    n_init: usize,
    items: &str,
) -> Result<(), FitError> {
    if k == 0 {
        return Err(FitError::K("k = 0; ask for at least one cluster".into()));
    }
    if k > n {
        return Err(FitError::K(format!(
            "k = {k} is larger than the number of {items} n = {n}; use k <= n"
        )));
    }
    if max_iter == 0 {
        return Err(FitError::Parameter(
            "max_iter = 0; allow at least one iteration".into(),
        ));
    }
    if n_init == 0 {
        return Err(FitError::Parameter(
            "n_init = 0; ask for at least one run".into(),
        ));
    }
    Ok(())
}

/// One given initial label per item, each below `k`.
pub(crate) fn check_initial_labels(
    given: &[u32],
    n: usize,
    k: usize,
    items: &str,
) -> Result<(), FitError> {
    if given.len() != n {
        return Err(FitError::InitLabels(format!(
            "{} initial labels given for {n} {items}",
            given.len()
        )));
    }
    if let Some(p) = given.iter().position(|l| *l as usize >= k) {
        let item = items.strip_suffix('s').unwrap_or(items);
        return Err(FitError::InitLabels(format!(
            "initial label {} of {item} {p} is not below k = {k}",
            given[p]
        )));
    }
    Ok(())
}
