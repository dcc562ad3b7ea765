//! A concurrency rule's shedding in the file: its `reserve`, its `adaptive`
//! limit, and the `class` of requests (read with the file's key syntax,
//! its values named in `classes`).

use throttle_fleet_core::adaptive::Vegas;
use throttle_fleet_core::{Class, InFlightLimit, Rule};

use super::{Loader, Result, Tables};
use crate::file;
use crate::model::{ClassSpec, KeySpec};

/// The most values a rule's `classes` may list.
const MAX_CLASS_VALUES: usize = 64;

impl Loader<'_> {
    /// A concurrency rule's `reserve` and `adaptive` from the file into
    /// `slots` (the core checks them with the rest of the rule).
    pub(super) fn shedding(&self, raw: &file::Rule, slots: &mut InFlightLimit) -> Result<()> {
        let limit = throttle_fleet_core::limits::MAX_LIMIT as i64;
        if let Some(r) = &raw.reserve {
            slots.reserve = self.int("reserve", r, 1, limit)? as u64;
        }
        if let Some(a) = &raw.adaptive {
            let a = a.get_ref();
            let mut vegas = Vegas::new();
            if let Some(v) = &a.initial {
                vegas = vegas.initial(self.int("adaptive.initial", v, 1, limit)? as u64);
            }
            if let Some(v) = &a.min {
                vegas = vegas.min(self.int("adaptive.min", v, 1, limit)? as u64);
            }
            if let Some(v) = &a.window_secs {
                vegas = vegas.window(self.seconds("adaptive.window_secs", v)?);
            }
            if let Some(v) = &a.probe_every {
                vegas = vegas.probe_every(self.int("adaptive.probe_every", v, 2, 1 << 20)? as u32);
            }
            slots.adaptive = Some(vegas);
        }
        // (The file's tiers join the rule when the policy is built.)
        if let Some(tiers) = &raw.tiers
            && (slots.reserve > 0 || slots.adaptive.is_some())
        {
            return Err(self.err(
                "tiers",
                tiers.span(),
                "a rule with a reserve or an adaptive limit has no tiers",
            ));
        }
        Ok(())
    }

    /// How `rule` reads a request's class, if the file says (`class`,
    /// `classes`).
    pub(super) fn class(
        &self,
        raw: &file::Rule,
        rule: &Rule,
        tables: Tables,
    ) -> Result<Option<ClassSpec>> {
        let Some(source) = &raw.class else {
            if let Some(classes) = &raw.classes {
                return Err(self.err(
                    "classes",
                    classes.span(),
                    "needs class: where a request's class is read",
                ));
            }
            if let Some(reserve) = &raw.reserve {
                return Err(self.err(
                    "reserve",
                    reserve.span(),
                    "needs class: which requests may use the reserve (e.g. class = \"route\" with classes = { critical = [\"/book\"] })",
                ));
            }
            return Ok(None);
        };
        if !rule.sheds() {
            return Err(self.err(
                "class",
                source.span(),
                "applies to a concurrency rule with a reserve or an adaptive limit",
            ));
        }
        let mut uses_ip = false;
        let key = self.simple_key("class", source, raw, tables, &mut uses_ip)?;
        if !matches!(key, KeySpec::Header(_) | KeySpec::Route | KeySpec::Jwt(_)) {
            return Err(self.err(
                "class",
                source.span(),
                "must be header:<name>, route or jwt:<claim>: a value a request names its class by",
            ));
        }
        let values = match &raw.classes {
            // Without a table, the value names the class.
            None => Class::ALL
                .into_iter()
                .map(|c| (c.name().to_owned(), c))
                .collect(),
            Some(classes) => {
                let c = classes.get_ref();
                let listed = [
                    (Class::Critical, &c.critical),
                    (Class::Default, &c.default),
                    (Class::Sheddable, &c.sheddable),
                ];
                let mut values: Vec<(String, Class)> = Vec::new();
                for (class, list) in listed {
                    for v in list {
                        if values.iter().any(|(w, _)| w == v.get_ref()) {
                            return Err(self.err(
                                "classes",
                                v.span(),
                                format!("{:?} is listed twice", v.get_ref()),
                            ));
                        }
                        if v.get_ref().is_empty() {
                            return Err(self.err("classes", v.span(), "a value must not be empty"));
                        }
                        values.push((v.get_ref().clone(), class));
                    }
                }
                if values.is_empty() || values.len() > MAX_CLASS_VALUES {
                    return Err(self.err(
                        "classes",
                        classes.span(),
                        format!("must list from 1 to {MAX_CLASS_VALUES} values"),
                    ));
                }
                values
            }
        };
        Ok(Some(ClassSpec { key, values }))
    }
}
