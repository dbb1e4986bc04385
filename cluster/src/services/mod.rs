//! The cluster's services (floor 3): what runs on top of this node's replicas across the groups
//! — backups (`backup`), consistency checks of replicas (`check`), the query coordinator (`queries`), the schema catalog (`catalog`), the follower of each
//! group's change log (`change_tail`), stored files (`files`), the placement of replicas
//! (`placement`) and the planner of their moves (`rebalance`), the cluster's version and feature gates (`upgrade`), replicas removed without knowing it (`departures`), giving back the space
//! deletes free (`reclaim`), splits of data groups (`splits`, paced by `split_pace`) and the timed jobs of the
//! metadata leader (`scheduler`). Each takes a `Replicas`, never the `Cluster`. Neighbours:
//! below, `replicas` and the leaves (query engine, schema rules, change log, files' records);
//! beside, `peer_service`; above, `cluster` (the one door).

pub mod backup;
pub mod catalog;
pub mod change_tail;
pub mod check;
pub(crate) mod departures;
pub mod files;
pub(crate) mod placement;
pub mod queries;
pub(crate) mod rebalance;
pub(crate) mod reclaim;
pub(crate) mod scheduler;
pub(crate) mod split_pace;
pub mod splits;
pub mod upgrade;
