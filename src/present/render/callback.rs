//! Button data: `<letter>:<id>`, at most 22 bytes, made by [`Callback::data`] and read back by
//! [`Callback::parse`], which refuses anything else a button press carries.

use crate::present::texts::Language;

/// What a button press asks for. The data is `<letter>:<positive id>` in ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    /// Buy (or renew) channel `id`'s default plan.
    Buy(i32),
    /// Buy plan `id` (a trial plan: start the trial).
    Plan(i64),
    /// The next page of the catalogue, after channel `id`.
    More(i32),
    /// Cancel the renewal of Stars subscription `id`.
    CancelRenewal(i64),
    /// Speak language `n` (1-based, in the order of [`Language::ALL`]) from now on.
    Language(u8),
}

impl Callback {
    /// The button's `callback_data`.
    pub fn data(self) -> String {
        match self {
            Callback::Buy(id) => format!("b:{id}"),
            Callback::Plan(id) => format!("p:{id}"),
            Callback::More(id) => format!("l:{id}"),
            Callback::CancelRenewal(id) => format!("x:{id}"),
            Callback::Language(n) => format!("g:{n}"),
        }
    }

    /// Parses data made by [`Callback::data`]; anything else (forged, from an older version,
    /// not ours) is `None`.
    pub fn parse(data: &str) -> Option<Callback> {
        let (kind, id) = data.split_once(':')?;
        if id.is_empty() || id.len() > 19 || !id.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let id: i64 = id.parse().ok()?;
        if id <= 0 {
            return None;
        }
        match kind {
            "b" => i32::try_from(id).ok().map(Callback::Buy),
            "l" => i32::try_from(id).ok().map(Callback::More),
            "p" => Some(Callback::Plan(id)),
            "x" => Some(Callback::CancelRenewal(id)),
            "g" => u8::try_from(id)
                .ok()
                .filter(|n| usize::from(*n) <= Language::ALL.len())
                .map(Callback::Language),
            _ => None,
        }
    }
}

impl Callback {
    /// The language a [`Callback::Language`] button chooses.
    pub fn language(n: u8) -> Option<Language> {
        Language::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::present::render::CALLBACK_DATA_MAX;

    #[test]
    fn callback_data_round_trips_fits_and_refuses_anything_else() {
        for c in [
            Callback::Buy(1),
            Callback::Buy(i32::MAX),
            Callback::Plan(1),
            Callback::Plan(i64::MAX),
            Callback::More(7),
            Callback::CancelRenewal(i64::MAX),
        ] {
            assert!(c.data().len() <= CALLBACK_DATA_MAX);
            assert_eq!(Callback::parse(&c.data()), Some(c));
        }
        for forged in [
            "",
            "b",
            "b:",
            "b:0",
            "b:-1",
            "b:+1",
            "b:1.0",
            "b: 1",
            "b:99999999999",
            "x:99999999999999999999",
            "z:1",
            "B:1",
            "b:1:2",
            "buy:1",
            "b:١",
            "p:0",
            "p:",
            "P:1",
        ] {
            assert_eq!(Callback::parse(forged), None, "{forged:?}");
        }
    }
}
