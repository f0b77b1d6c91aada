//! A set of field numbers: a bit per number below 64 (all of Kubernetes' but the rarest), a
//! short list for the others.

/// Field numbers, without allocating while they are all below 64.
#[derive(Debug, Default)]
pub(crate) struct FieldSet {
    low: u64,
    high: Vec<u32>,
}

impl FieldSet {
    /// Adds `number`; whether it was new.
    #[inline]
    pub(crate) fn insert(&mut self, number: u32) -> bool {
        if number < 64 {
            let bit = 1u64 << number;
            let new = self.low & bit == 0;
            self.low |= bit;
            return new;
        }
        if self.high.contains(&number) {
            return false;
        }
        self.high.push(number);
        true
    }

    /// Whether `number` is in the set.
    #[inline]
    pub(crate) fn contains(&self, number: u32) -> bool {
        match number {
            0..64 => self.low & (1u64 << number) != 0,
            _ => self.high.contains(&number),
        }
    }
}
