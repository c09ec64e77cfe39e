//! A small deterministic generator (xorshift64) for the property and differential tests: the
//! same seed always gives the same inputs, so a failure that prints its seed can be replayed,
//! with no dependency.

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index into a collection of `n` items.
    pub(crate) fn index(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).unwrap_or(0)
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.index(items.len())]
    }

    /// One to `max` pieces drawn from `alphabet`, joined.
    pub(crate) fn text(&mut self, alphabet: &[&str], max: u64) -> String {
        (0..=self.below(max)).map(|_| self.pick(alphabet)).collect()
    }
}
