//! A cursor: how far a subscriber has been through every group's changes — one position per
//! group (`0..=shards`, then the groups splits added, by id), written as the positions joined
//! by dots. A position is a log index
//! (every change up to that entry passed on), or `index:n` inside an entry that made several
//! changes (a batch): the entries before `index` and the first `n` changes of entry `index`.
//! Each event carries the cursor after it; a client that reconnects with it is sent what it
//! missed (`hub`), nothing twice.

use std::cmp::Ordering;

use super::RealtimeError;

/// How far one group's changes were passed on: every entry before `index`, and the first
/// `passed` changes of entry `index` (`WHOLE`: all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub index: u64,
    pub passed: u32,
}

/// `Position::passed` of an entry passed on whole.
const WHOLE: u32 = u32::MAX;

impl Position {
    /// Every change up to and including entry `index`.
    pub fn whole(index: u64) -> Position {
        Position {
            index,
            passed: WHOLE,
        }
    }

    /// The first `passed` changes of entry `index` (and everything before it).
    pub fn within(index: u64, passed: u32) -> Position {
        Position { index, passed }
    }

    /// Whether the change `nth` (from 0) of entry `index` is at or before this position.
    pub fn covers(&self, index: u64, nth: u32) -> bool {
        index < self.index || (index == self.index && nth < self.passed)
    }

    /// The last entry passed on whole: where a follower of the group's log resumes.
    pub fn entries_before(&self) -> u64 {
        match self.passed {
            WHOLE => self.index,
            _ => self.index.saturating_sub(1),
        }
    }

    fn encode_into(&self, out: &mut String) {
        out.push_str(&self.index.to_string());
        if self.passed != WHOLE {
            out.push(':');
            out.push_str(&self.passed.to_string());
        }
    }

    fn parse(text: &str) -> Option<Position> {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        match text.split_once(':') {
            None if digits(text) => Some(Position::whole(text.parse().ok()?)),
            Some((i, n)) if digits(i) && digits(n) => {
                let passed: u32 = n.parse().ok()?;
                (passed != WHOLE).then_some(Position::within(i.parse().ok()?, passed))
            }
            _ => None,
        }
    }
}

impl Ord for Position {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.index, self.passed).cmp(&(other.index, other.passed))
    }
}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor(pub Vec<Position>);

impl Cursor {
    /// The cursor of entries passed on whole up to `indexes` (the hub's positions).
    pub fn at(indexes: &[u64]) -> Cursor {
        Cursor(indexes.iter().map(|&i| Position::whole(i)).collect())
    }

    /// The cursor's text.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.0.len() * 6);
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            p.encode_into(&mut out);
        }
        out
    }

    /// Reads a cursor of a cluster whose groups were `groups` (from the cluster's first ones to
    /// those it has now: a cursor given before a split names fewer), padded to the groups it
    /// has now: a group the cursor does not name is read from its beginning (107 otherwise).
    pub fn parse(
        text: &str,
        groups: std::ops::RangeInclusive<usize>,
    ) -> Result<Cursor, RealtimeError> {
        let bad = || RealtimeError::InvalidMessage("cursor is not one this cluster gave".into());
        let positions = text
            .split('.')
            .map(|p| Position::parse(p).ok_or_else(bad))
            .collect::<Result<Vec<Position>, _>>()?;
        if !groups.contains(&positions.len()) {
            return Err(bad());
        }
        Ok(Cursor(positions).padded(*groups.end()))
    }

    /// The cursor naming `len` groups at least: those it does not name at their beginning.
    pub fn padded(mut self, len: usize) -> Cursor {
        if self.0.len() < len {
            self.0.resize(len, Position::whole(0));
        }
        self
    }

    /// Group `g`'s position (its beginning when the cursor does not name it).
    fn get(&self, g: usize) -> Position {
        self.0.get(g).copied().unwrap_or(Position::whole(0))
    }

    /// Whether some group's position is past `other`'s.
    pub fn ahead_of(&self, other: &Cursor) -> bool {
        (0..self.0.len().max(other.0.len())).any(|g| self.get(g) > other.get(g))
    }

    /// Each group's later position of the two.
    pub fn max_with(&self, other: &Cursor) -> Cursor {
        Cursor(
            (0..self.0.len().max(other.0.len()))
                .map(|g| self.get(g).max(other.get(g)))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_shapes() {
        let c = Cursor(vec![
            Position::whole(3),
            Position::whole(0),
            Position::within(12345678901, 2),
        ]);
        assert_eq!(c.encode(), "3.0.12345678901:2");
        assert_eq!(Cursor::parse(&c.encode(), 3..=3).unwrap(), c);
        // A cursor given before a split names fewer groups: the new ones from their start.
        assert_eq!(
            Cursor::parse(&c.encode(), 3..=5).unwrap(),
            c.clone().padded(5)
        );
        assert_eq!(
            Cursor::parse(&c.encode(), 3..=5).unwrap().0[4],
            Position::whole(0)
        );
        assert!(Cursor::parse("1.2", 3..=5).is_err());
        assert_eq!(
            Cursor::at(&[1, 2]).max_with(&Cursor::at(&[0, 3, 4])),
            Cursor::at(&[1, 3, 4])
        );
        assert!(Cursor::at(&[1, 2, 1]).ahead_of(&Cursor::at(&[1, 2])));
        for bad in [
            "",
            "1.2",
            "1.2.3.4",
            "1..3",
            "a.b.c",
            "-1.2.3",
            "1.2.3:",
            "1.2.:3",
            "1.2.3:-1",
            "1.2.3:4294967295",
            "1.2.3:1:2",
            "1.+2.3",
        ] {
            assert!(Cursor::parse(bad, 3..=3).is_err(), "{bad}");
        }
        assert!(c.ahead_of(&Cursor::at(&[3, 0, 12345678900])));
        assert!(
            !c.ahead_of(&Cursor::at(&[3, 0, 12345678901])),
            "inside an entry is before its end"
        );
        assert_eq!(
            c.max_with(&Cursor::at(&[4, 0, 1])).0,
            vec![
                Position::whole(4),
                Position::whole(0),
                Position::within(12345678901, 2)
            ]
        );
    }

    #[test]
    fn a_position_inside_an_entry_covers_its_first_changes_only() {
        let p = Position::within(10, 2);
        assert!(p.covers(9, 40));
        assert!(p.covers(10, 0) && p.covers(10, 1));
        assert!(!p.covers(10, 2) && !p.covers(11, 0));
        assert_eq!(p.entries_before(), 9);
        let w = Position::whole(10);
        assert!(w.covers(10, 1000) && !w.covers(11, 0));
        assert_eq!(w.entries_before(), 10);
        assert!(Position::whole(9) < p && p < w);
    }
}
