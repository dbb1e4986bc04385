//! A cursor: how far a subscriber has been through every group's changes — one log position per
//! group (`0..=shards`), written as the decimal positions joined by dots. Each event carries the
//! cursor after it; a client that reconnects with it is sent what it missed (`hub`).

use super::RealtimeError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor(pub Vec<u64>);

impl Cursor {
    /// The cursor's text.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.0.len() * 6);
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            out.push_str(&p.to_string());
        }
        out
    }

    /// Reads a cursor of a cluster with `groups` groups (107 otherwise).
    pub fn parse(text: &str, groups: usize) -> Result<Cursor, RealtimeError> {
        let bad = || RealtimeError::InvalidMessage("cursor is not one this cluster gave".into());
        let positions = text
            .split('.')
            .map(|p| p.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<Vec<u64>, _>>()?;
        if positions.len() != groups {
            return Err(bad());
        }
        Ok(Cursor(positions))
    }

    /// Whether some group's position is past `other`'s.
    pub fn ahead_of(&self, other: &[u64]) -> bool {
        self.0.iter().zip(other).any(|(a, b)| a > b)
    }

    /// Each group's later position of the two.
    pub fn max_with(&self, other: &[u64]) -> Cursor {
        Cursor(self.0.iter().zip(other).map(|(a, b)| *a.max(b)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_shapes() {
        let c = Cursor(vec![3, 0, 12345678901]);
        assert_eq!(c.encode(), "3.0.12345678901");
        assert_eq!(Cursor::parse(&c.encode(), 3).unwrap(), c);
        for bad in ["", "1.2", "1.2.3.4", "1..3", "a.b.c", "-1.2.3"] {
            assert!(Cursor::parse(bad, 3).is_err(), "{bad}");
        }
        assert!(c.ahead_of(&[3, 0, 5]));
        assert!(!c.ahead_of(&[3, 1, 12345678901]));
        assert_eq!(c.max_with(&[4, 0, 1]).0, vec![4, 0, 12345678901]);
    }
}
