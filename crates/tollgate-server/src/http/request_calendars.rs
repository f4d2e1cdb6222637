//! The calendars `POST /v1/decide` requests name (`"calendar"`), made once
//! each and kept, up to [`MAX_REQUEST_CALENDARS`]: a process holds at most
//! [`tollgate::calendar::Calendar::MAX_DISTINCT`] calendars for good, and
//! the policy files' must always find room, whatever clients send.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value};
use tollgate::calendar::{Calendar, Period};

use crate::http::error::ApiError;

/// The most distinct calendars requests may name in one process.
pub const MAX_REQUEST_CALENDARS: usize = 1_024;

/// A calendar as a request names it: period, time zone and anchor as
/// written.
type Named = (Period, String, Option<String>);

/// The calendars requests have named so far.
#[derive(Default)]
pub(crate) struct RequestCalendars {
    made: Mutex<HashMap<Named, Calendar>>,
}

impl RequestCalendars {
    /// The calendar the request's `"calendar"` object names: made the first
    /// time, then the same one.
    pub(crate) fn calendar(&self, named: &CalendarField) -> Result<Calendar, ApiError> {
        let key = (named.period, named.time_zone.clone(), named.anchor.clone());
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&calendar) = made.get(&key) {
            return Ok(calendar);
        }
        if made.len() >= MAX_REQUEST_CALENDARS {
            return Err(ApiError::field(
                "calendar",
                format!(
                    "requests have named {MAX_REQUEST_CALENDARS} distinct calendars, the most this service \
                     keeps: name one of those, or give the resource its calendar in the policy file"
                ),
            ));
        }
        let calendar = Calendar::new(named.period, &named.time_zone, named.anchor.as_deref())
            .map_err(|err| ApiError::field(&format!("calendar.{}", err.field()), err.reason().to_owned()))?;
        made.insert(key, calendar);
        Ok(calendar)
    }
}

/// `"calendar": {"period": "month", "time_zone": "Europe/Berlin", "anchor":
/// "2026-01-15T09:00:00"}`, read but not yet made (making one takes a
/// place in the process's calendars: [`RequestCalendars`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CalendarField {
    pub(crate) period: Period,
    pub(crate) time_zone: String,
    pub(crate) anchor: Option<String>,
}

/// The request's `"calendar"`, when it names one.
pub(crate) fn calendar_field(fields: &Map<String, Value>) -> Result<Option<CalendarField>, ApiError> {
    let object = match fields.get("calendar") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Err(ApiError::field(
                "calendar",
                r#"must be an object such as {"period": "month", "time_zone": "Europe/Berlin"}"#,
            ))
        }
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| !["period", "time_zone", "anchor"].contains(&k.as_str()))
    {
        return Err(ApiError::field(
            &format!("calendar.{unknown}"),
            "is not a field of a calendar: period, time_zone and anchor are",
        ));
    }
    let text = |name: &str| -> Result<Option<&str>, ApiError> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::field(&format!("calendar.{name}"), "must be a string")),
        }
    };
    let period = text("period")?.ok_or_else(|| {
        ApiError::field(
            "calendar.period",
            "is required: day, week, month, quarter or year",
        )
    })?;
    let period: Period = period
        .parse()
        .map_err(|err: tollgate::ConfigError| ApiError::field("calendar.period", err.reason().to_owned()))?;
    Ok(Some(CalendarField {
        period,
        time_zone: text("time_zone")?.unwrap_or("UTC").to_owned(),
        anchor: text("anchor")?.map(str::to_owned),
    }))
}
