//! The live rules of one backend, held weakly: a flush or shutdown reaches
//! every rule still in use, and dropping a layer drops its rules. A rule
//! whose layer went away with counts still to write is *retired*: held
//! strongly until they are written.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

pub(crate) struct Registry<T> {
    live: Mutex<Vec<Weak<T>>>,
    retired: Mutex<Vec<Arc<T>>>,
}

impl<T> std::fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Registry({} rules, {} retired)",
            self.live.lock().len(),
            self.retired.lock().len()
        )
    }
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            live: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
        }
    }
}

impl<T> Registry<T> {
    pub(crate) fn add(&self, rule: &Arc<T>) {
        self.live.lock().push(Arc::downgrade(rule));
    }

    /// The rules still alive, retired ones included (forgetting the others).
    pub(crate) fn live(&self) -> Vec<Arc<T>> {
        let mut rules = self.live.lock();
        rules.retain(|w| w.strong_count() > 0);
        rules.iter().filter_map(Weak::upgrade).collect()
    }

    /// Keeps a rule whose limiter was dropped until [`forget`](Self::forget).
    pub(crate) fn retire(&self, rule: Arc<T>) {
        self.retired.lock().push(rule);
    }

    /// Lets a retired rule go (it has nothing left to write).
    pub(crate) fn forget(&self, rule: &T) {
        self.retired
            .lock()
            .retain(|r| !std::ptr::eq(Arc::as_ptr(r), rule));
    }
}
