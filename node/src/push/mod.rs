//! Push notifications (spec 4.12, decisions/0022): `request` turns a `POST /1/push` body into
//! what to send, to whom and when (141-144); `settings` holds and checks an app's provider
//! credentials (set through app management). Still to come, on the plan of decisions/0022: the
//! endpoint and `_PushStatus`, the replicated queue and resumable fan-out run by the
//! leader-elected scheduler, and the APNs, FCM, WNS and webhook providers.

pub mod request;
pub mod settings;
