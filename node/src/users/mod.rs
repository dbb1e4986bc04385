//! Users (spec 2.3, 4.5): accounts stored as objects of the system class `_User`, their
//! sessions, and the uniqueness of their usernames, emails and phone numbers.
//!
//! A user object keeps two internal fields no client can write or see: `_password` (an argon2
//! hash) and `_sessions` (token → expiry in ms). A session token is 32 random characters followed
//! by the user's objectId, so checking one is a single read of the user (from the node's own
//! replica when it is current: `session`). The flows of accounts (`accounts`: sign-up and change
//! rules, claims on names) and of logging in (`login`) are here; their endpoints, which add the
//! ACL checks and the answers, are `api::users`. Every data handler asks `session::principals`
//! who a request acts as, for ACLs.

pub mod accounts;
pub mod email_links;
mod error;
pub mod login;
pub mod protected;
pub mod roles;
mod service_writes;
pub mod session;
pub mod third_party;
pub mod unique;

use basalt_cluster::names::ClassName;
pub use error::UsersError;
pub use service_writes::set_user_fields;
pub use unique::login_fields;

/// The system class of users.
pub static USER_CLASS: ClassName = ClassName::service("_User");

/// Internal field holding the password hash.
pub const PASSWORD_FIELD: &str = "_password";

/// Internal field holding the user's sessions (token → expiry, ms since the epoch).
pub const SESSIONS_FIELD: &str = "_sessions";

/// Fields of a user only the service sets (105 when a client sends them, master key aside).
pub const SERVICE_FIELDS: [&str; 4] = [
    "sessionToken",
    "emailVerified",
    "mobilePhoneVerified",
    "authData",
];
