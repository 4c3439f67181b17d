//! A one-line progress display on a terminal, rewritten in place with `\r`; silent otherwise.

use popcorn::kkmeans::Progress;
use std::io::Write;
use std::time::{Duration, Instant};

/// Least time between two redraws of iteration lines.
const REDRAW_EVERY: Duration = Duration::from_millis(50);

/// The progress line of one task (reading, one fit).
pub struct ProgressLine<'a> {
    out: Option<&'a mut dyn Write>,
    task: String,
    runs: usize,
    start: Instant,
    last_draw: Option<Instant>,
    width: usize,
}

impl<'a> ProgressLine<'a> {
    /// A line about `task` on `out` when `enabled` (a terminal), else nothing; `runs` is the
    /// number of runs of a fit (shown when above 1).
    pub fn new(out: &'a mut dyn Write, enabled: bool, task: &str, runs: usize) -> ProgressLine<'a> {
        ProgressLine {
            out: enabled.then_some(out),
            task: task.to_string(),
            runs,
            start: Instant::now(),
            last_draw: None,
            width: 0,
        }
    }

    /// Shows that a phase started (empty: the task itself).
    pub fn phase(&mut self, phase: &str) {
        let text = if phase.is_empty() {
            format!("{}...", self.task)
        } else {
            format!("{}: {phase}...", self.task)
        };
        self.draw(&text);
    }

    /// Shows a library progress event, iterations at most every [`REDRAW_EVERY`].
    pub fn update(&mut self, event: &Progress) {
        match event {
            Progress::Phase(p) => self.phase(p),
            Progress::Iteration {
                run,
                iteration,
                objective,
                changed,
            } => {
                if self.last_draw.is_some_and(|t| t.elapsed() < REDRAW_EVERY) {
                    return;
                }
                let run = if self.runs > 1 {
                    format!("run {}/{}, ", run + 1, self.runs)
                } else {
                    String::new()
                };
                let text = format!(
                    "{}: {run}iteration {iteration}: objective {objective:.6e}, {changed} labels changed",
                    self.task
                );
                self.draw(&text);
            }
        }
    }

    fn draw(&mut self, text: &str) {
        let elapsed = self.start.elapsed().as_secs_f64();
        let line = format!("[{elapsed:7.2}s] {text}");
        if let Some(out) = self.out.as_mut() {
            let pad = self.width.saturating_sub(line.chars().count());
            // A failed write to the terminal only loses the display.
            let _ = write!(out, "\r{line}{}", " ".repeat(pad));
            let _ = out.flush();
            self.width = line.chars().count();
            self.last_draw = Some(Instant::now());
        }
    }

    /// Erases the line.
    pub fn clear(&mut self) {
        if let Some(out) = self.out.as_mut() {
            if self.width > 0 {
                let _ = write!(out, "\r{}\r", " ".repeat(self.width));
                let _ = out.flush();
            }
            self.width = 0;
        }
    }
}

impl Drop for ProgressLine<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}
