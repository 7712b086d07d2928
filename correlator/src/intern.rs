//! Shared copies of the names that repeat: tool names and namespaces, MCP aliases.
//!
//! Hosts use a handful of names, each seen on every call; one `Arc<str>` per distinct name
//! lets windows, pending intervals, records and the trace reader's running calls share it
//! instead of allocating a copy each (with the records' other shared strings, replay went
//! from 3.8 allocations per event to 2.0; docs/performance.md, "Correlator replay").

use std::sync::Arc;

use rustc_hash::FxHashSet;

/// How many distinct names an [`Interner`] keeps.
const MAX_NAMES: usize = 4096;

/// A bounded set of shared names: past [`MAX_NAMES`] distinct ones (a peer that makes names
/// up) new ones are simply allocated, so the table cannot grow without bound.
#[derive(Default)]
pub(crate) struct Interner(FxHashSet<Arc<str>>);

impl Interner {
    /// A shared copy of `name`.
    pub(crate) fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.0.get(name) {
            return n.clone();
        }
        let n: Arc<str> = name.into();
        if self.0.len() < MAX_NAMES {
            self.0.insert(n.clone());
        }
        n
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_shared_until_the_table_is_full() {
        let mut names = Interner::default();
        let a = names.get("exec");
        let b = names.get("exec");
        assert!(Arc::ptr_eq(&a, &b));
        for i in 0..MAX_NAMES + 10 {
            names.get(&format!("tool{i}"));
        }
        assert_eq!(names.len(), MAX_NAMES);
        // Past the bound a name is still returned, just not kept.
        assert_eq!(&*names.get("made-up"), "made-up");
        assert_eq!(names.len(), MAX_NAMES);
        let c = names.get("exec");
        assert!(
            Arc::ptr_eq(&a, &c),
            "names kept before the bound stay shared"
        );
    }
}
