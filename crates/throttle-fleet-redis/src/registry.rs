//! The live rules of one backend, held weakly: a flush or shutdown reaches
//! every rule still in use, and dropping a layer drops its rules.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

pub(crate) struct Registry<T>(Mutex<Vec<Weak<T>>>);

impl<T> std::fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registry({} rules)", self.0.lock().len())
    }
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self(Mutex::new(Vec::new()))
    }
}

impl<T> Registry<T> {
    pub(crate) fn add(&self, rule: &Arc<T>) {
        self.0.lock().push(Arc::downgrade(rule));
    }

    /// The rules still alive (forgetting the others).
    pub(crate) fn live(&self) -> Vec<Arc<T>> {
        let mut rules = self.0.lock();
        rules.retain(|w| w.strong_count() > 0);
        rules.iter().filter_map(Weak::upgrade).collect()
    }
}
