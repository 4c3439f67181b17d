//! Ctrl-C during a fit: the fit runs with the GIL released, and between its phases and
//! iterations its control callback attaches to Python for a moment to run the signal handlers
//! (`PyErr_CheckSignals`). A handler that raises (`KeyboardInterrupt` by default) stops the
//! fit there, and that exception is the one the caller sees.

use popcorn::kkmeans::Progress;
use pyo3::{PyErr, Python};
use std::ops::ControlFlow;

/// The exception a signal handler raised during a fit, if any.
#[derive(Default)]
pub struct SignalCheck {
    raised: Option<PyErr>,
}

impl SignalCheck {
    /// A control callback for `fit_with_control`: breaks once a signal handler raises, keeping
    /// its exception.
    pub fn control(&mut self) -> impl FnMut(&Progress) -> ControlFlow<()> + '_ {
        |_| {
            if self.raised.is_some() {
                return ControlFlow::Break(());
            }
            match Python::attach(|py| py.check_signals()) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    self.raised = Some(e);
                    ControlFlow::Break(())
                }
            }
        }
    }

    /// The exception a handler raised, which replaces the fit's own error.
    pub fn take(self) -> Option<PyErr> {
        self.raised
    }
}
