//! `POPCORN_LOG=time` for partitioned runs: every schedule entry's time on each of this
//! process's ranks (marks on each rank's backend after each entry, so an entry's time includes
//! any wait for its launch or for the other ranks), and the host's share of the run: preparing
//! the ranks' buffers, queueing the schedule, waiting for the ranks to settle, handing the
//! outputs over.

use crate::backend::Backend;
use crate::error::RuntimeError;
use popcorn_dsl::plan::collective::{RankStep, StepMode};
use popcorn_dsl::plan::Plan;
use std::time::{Duration, Instant};

/// The marks and host instants of one partitioned run, kept only under `POPCORN_LOG=time`.
pub(super) struct RankClock<'p, B: Backend> {
    /// This process's ranks, each with its backend.
    ranks: Vec<(usize, &'p B)>,
    /// `marks[i][e]`: the mark on local rank `i` after `e` schedule entries (`e = 0`: before).
    marks: Vec<Vec<B::Mark>>,
    /// What each entry was.
    entries: Vec<String>,
    /// When the run began (before its buffers were taken).
    began: Instant,
    /// The host's stages so far, with their names.
    host: Vec<(&'static str, Duration)>,
    /// The end of the last host stage.
    last: Instant,
}

impl<'p, B: Backend> RankClock<'p, B> {
    /// A clock for a run that began at `began`, or `None` where `POPCORN_LOG=time` is off.
    pub(super) fn new(began: Instant) -> Option<Self> {
        popcorn_dsl::settings::settings()
            .log
            .time
            .then(|| RankClock {
                ranks: Vec::new(),
                marks: Vec::new(),
                entries: Vec::new(),
                began,
                host: Vec::new(),
                last: began,
            })
    }

    /// Ends the host stage `name` now.
    pub(super) fn host_stage(&mut self, name: &'static str) {
        let now = Instant::now();
        self.host.push((name, now - self.last));
        self.last = now;
    }

    /// Marks the start of the schedule on each of `ranks`.
    pub(super) fn start(&mut self, ranks: Vec<(usize, &'p B)>) -> Result<(), RuntimeError> {
        self.marks = ranks
            .iter()
            .map(|(_, b)| b.mark().map(|m| vec![m]))
            .collect::<Result<_, _>>()?;
        self.ranks = ranks;
        Ok(())
    }

    /// Marks the end of schedule entry `entry` on every rank.
    pub(super) fn after(&mut self, plan: &Plan, entry: &RankStep) -> Result<(), RuntimeError> {
        for (marks, (_, b)) in self.marks.iter_mut().zip(&self.ranks) {
            marks.push(b.mark()?);
        }
        self.entries.push(describe(plan, entry));
        Ok(())
    }

    /// Prints the table (waits for the marks).
    pub(super) fn print(&self, plan: &Plan) -> Result<(), RuntimeError> {
        let mut lines = Vec::with_capacity(self.entries.len() + 2);
        let mut header = format!("  {:<34}", "entry");
        for (r, _) in &self.ranks {
            header.push_str(&format!(" {:>12}", format!("rank {r} ms")));
        }
        lines.push(header);
        let mut totals = vec![0.0; self.ranks.len()];
        for (e, what) in self.entries.iter().enumerate() {
            let mut line = format!("  {what:<34}");
            for (i, (_, b)) in self.ranks.iter().enumerate() {
                let ms = b.elapsed_ms(&self.marks[i][e], &self.marks[i][e + 1])?;
                totals[i] += ms;
                line.push_str(&format!(" {ms:>12.3}"));
            }
            lines.push(line);
        }
        let mut total = format!("  {:<34}", "schedule (from its first mark)");
        for t in &totals {
            total.push_str(&format!(" {t:>12.3}"));
        }
        lines.push(total);
        let host: Vec<String> = self
            .host
            .iter()
            .map(|(name, d)| format!("{name} {:.3} ms", d.as_secs_f64() * 1e3))
            .collect();
        eprintln!(
            "[popcorn time] {} over {} rank(s), {} here ({:.3} ms on the host: {})\n{}",
            plan.program,
            plan.partition.as_ref().map_or(1, |p| p.ranks()),
            self.ranks.len(),
            (self.last - self.began).as_secs_f64() * 1e3,
            host.join(", "),
            lines.join("\n")
        );
        Ok(())
    }
}

/// One schedule entry in a few words: `step 3 cluster sums (rows)`, `all-gather z`.
fn describe(plan: &Plan, entry: &RankStep) -> String {
    match entry {
        RankStep::Run { step, mode, .. } => {
            let op = plan.steps.get(*step).map_or("?".into(), |s| s.op_name());
            let how = match mode {
                StepMode::Local => "rows",
                StepMode::Replicated => "replicated",
                StepMode::Shared => "shared",
            };
            format!("step {step} {op} ({how})")
        }
        RankStep::Collective(c) => format!("{} {}", c.name(), plan.value(c.value).name),
    }
}

#[cfg(test)]
mod tests {
    use super::describe;
    use crate::ranks::tests::{planned, program};

    #[test]
    fn entries_are_named_by_step_operation_and_mode_or_by_collective_and_value() {
        let dims = [("n".to_string(), 10), ("k".to_string(), 3)]
            .into_iter()
            .collect();
        let plan = planned(&program("kkmeans_iteration"), &dims, 2);
        let part = plan.partition.as_ref().expect("partitioned");
        let names: Vec<String> = part.schedule.iter().map(|e| describe(&plan, e)).collect();
        for want in [
            "step 0 counts (replicated)",
            "step 3 cluster sums (rows)",
            "all-gather z",
            "all-reduce(sum) changed",
        ] {
            assert!(names.iter().any(|n| n == want), "no `{want}` in {names:?}");
        }
        assert_eq!(names.len(), part.schedule.len());
    }
}
