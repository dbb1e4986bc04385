//! The create lane: which shard this node gives its new objects' ids to (decisions/0028).
//!
//! A node that leads data shards sends the creates it receives to one of them at a time, the
//! led shards taking turns (`RaftTuning::create_lane_ms`) in shard order. Creates arriving
//! together then share one group, whose Raft batches them: one log append, one replication message per
//! follower, one fsync on each replica and one apply for many creates, where spreading them
//! over every led shard cost a full round each. Over turns every led shard gets its share.
//! Used by `Replicas::new_object_id`; the ids themselves are `object::new_object_id`.

use crate::ids::GroupId;
use crate::object::new_object_id;

/// Ids drawn per data shard, at most, looking for one on the lane's shard (an id lands on a
/// given shard one time in `shards`).
const DRAWS_PER_SHARD: usize = 64;

/// Most ids drawn for one new object.
const MAX_DRAWS: usize = 4096;

/// A node's create lane: the data shards it leads, in shard order, and how long each one's
/// turn lasts (0: no turns, each new object on a led shard drawn at random).
pub struct Lane<'a> {
    pub turn_ms: u64,
    pub led: &'a [GroupId],
}

impl Lane<'_> {
    /// The led shard whose turn it is at `now_ms` (none when this node leads no data shard
    /// or takes no turns).
    pub fn shard_at(&self, now_ms: i64) -> Option<GroupId> {
        let n = self.led.len() as i64;
        let turn_ms = i64::try_from(self.turn_ms).unwrap_or(i64::MAX);
        if n == 0 || turn_ms == 0 {
            return None;
        }
        let turn = now_ms.div_euclid(turn_ms);
        self.led.get(turn.rem_euclid(n) as usize).copied()
    }

    /// A new objectId on the lane's shard at `now_ms` (`group_of` says where an id of the
    /// object's class lands, among `groups` data groups); failing that (after many draws, or
    /// without turns), one on any led shard, else any.
    pub fn draw_id(
        &self,
        group_of: impl Fn(&str) -> GroupId,
        groups: usize,
        now_ms: i64,
    ) -> String {
        if self.led.is_empty() {
            return new_object_id();
        }
        let target = self.shard_at(now_ms);
        let draws = (DRAWS_PER_SHARD * groups.max(1)).min(MAX_DRAWS);
        let mut fallback = None;
        for _ in 0..draws {
            let id = new_object_id();
            let shard = group_of(&id);
            if !self.led.contains(&shard) {
                continue;
            }
            if target.is_none_or(|t| t == shard) {
                return id;
            }
            fallback.get_or_insert(id);
        }
        fallback.unwrap_or_else(new_object_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::shard_for;
    use crate::raft::CREATE_LANE_MS;

    fn g(n: u32) -> GroupId {
        GroupId::new(n)
    }

    const TURN: i64 = CREATE_LANE_MS as i64;

    /// Where an id of a `Game` of `app` lands among 16 shards.
    fn game(id: &str) -> GroupId {
        shard_for("app", "Game", id, 16)
    }

    fn lane(led: &[GroupId]) -> Lane<'_> {
        Lane {
            turn_ms: CREATE_LANE_MS,
            led,
        }
    }

    #[test]
    fn led_shards_take_turns_in_order() {
        let led = [g(2), g(5), g(9)];
        let at = |turn: i64| lane(&led).shard_at(turn * TURN + 7);
        assert_eq!(at(0), Some(g(2)));
        assert_eq!(at(1), Some(g(5)));
        assert_eq!(at(2), Some(g(9)));
        assert_eq!(at(3), Some(g(2)));
        // A turn lasts CREATE_LANE_MS.
        assert_eq!(lane(&led).shard_at(TURN - 1), Some(g(2)));
        assert_eq!(lane(&led).shard_at(TURN), Some(g(5)));
        // Every led shard gets the same number of turns over a whole round.
        let mut turns = std::collections::BTreeMap::new();
        for t in 0..300 {
            *turns.entry(at(t).unwrap()).or_insert(0) += 1;
        }
        assert_eq!(turns.values().collect::<Vec<_>>(), vec![&100, &100, &100]);
    }

    #[test]
    fn a_node_leading_no_shard_has_no_lane() {
        assert_eq!(lane(&[]).shard_at(12_345), None);
        // Its ids are still ids, on any shard.
        let id = lane(&[]).draw_id(game, 16, 12_345);
        assert_eq!(id.len(), 10);
    }

    #[test]
    fn ids_land_on_the_lane_shard() {
        let led = [g(3), g(7), g(16)];
        for turn in 0..30 {
            let now = turn * TURN;
            let want = lane(&led).shard_at(now).unwrap();
            for _ in 0..20 {
                let id = lane(&led).draw_id(game, 16, now);
                assert_eq!(shard_for("app", "Game", &id, 16), want, "{id} at {now}");
            }
        }
    }

    #[test]
    fn times_before_the_epoch_still_pick_a_led_shard() {
        let led = [g(1), g(4)];
        assert!(led.contains(&lane(&led).shard_at(-1).unwrap()));
        assert!(led.contains(&lane(&led).shard_at(i64::MIN).unwrap()));
    }

    #[test]
    fn without_turns_ids_spread_over_every_led_shard() {
        let led = [g(2), g(6), g(11)];
        let lane = Lane {
            turn_ms: 0,
            led: &led,
        };
        assert_eq!(lane.shard_at(0), None);
        let mut seen = std::collections::BTreeMap::new();
        for _ in 0..600 {
            let id = lane.draw_id(game, 16, 0);
            *seen.entry(shard_for("app", "Game", &id, 16)).or_insert(0) += 1;
        }
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), led.to_vec());
        assert!(seen.values().all(|&n| n > 100), "{seen:?}");
    }
}
