//! Phone numbers in one form: E.164 (`+8613700000001`), parsed with the `phonenumber` crate
//! (libphonenumber's metadata) in the node's default region (`--phone-region`, default CN) when
//! a number has no country code. `13700000001`, `+8613700000001`, `008613700000001` and
//! `013700000001` are one number, so limits and codes keyed on a number cannot be multiplied
//! by writing it differently. Neighbours: `sms` keys quotas, codes and attempts on this form.

use std::sync::OnceLock;

use phonenumber::country::Id;
use phonenumber::Mode;

static DEFAULT_REGION: OnceLock<Id> = OnceLock::new();

/// Sets the region of numbers written without a country code (once, at start-up).
pub fn set_default_region(code: &str) -> anyhow::Result<()> {
    let id: Id = code.to_ascii_uppercase().parse().map_err(|_| {
        anyhow::anyhow!("unknown phone region {code:?} (use an ISO 3166 code such as CN or US)")
    })?;
    let _ = DEFAULT_REGION.set(id);
    Ok(())
}

fn default_region() -> Id {
    DEFAULT_REGION.get().copied().unwrap_or(Id::CN)
}

/// The E.164 form of a valid phone number; `None` when it is not one.
pub fn normalize(raw: &str) -> Option<String> {
    let raw = raw.trim();
    // Digits and the usual separators only: the parser would read letters as a keypad's.
    let usual = |c: char| c.is_ascii_digit() || " +-().".contains(c);
    if raw.is_empty() || raw.len() > 32 || !raw.chars().all(usual) {
        return None;
    }
    // The parser has panicked on odd input before (upstream issues); a panic must not take
    // down the request.
    std::panic::catch_unwind(|| {
        let n = phonenumber::parse(Some(default_region()), raw).ok()?;
        phonenumber::is_valid(&n).then(|| n.format().mode(Mode::E164).to_string())
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_number_written_many_ways_is_one_number() {
        for form in [
            "13700000001",
            "+8613700000001",
            "008613700000001",
            "013700000001",
            " 137 0000 0001 ",
            "+86 137-0000-0001",
        ] {
            assert_eq!(normalize(form).as_deref(), Some("+8613700000001"), "{form}");
        }
        assert_eq!(normalize("+14155552671").as_deref(), Some("+14155552671"));
        for bad in [
            "",
            "12",
            "abc",
            "1380013800a",
            "+999999",
            "1370000000123456789",
        ] {
            assert_eq!(normalize(bad), None, "{bad}");
        }
    }
}
