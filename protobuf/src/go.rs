//! Go's text forms of times and durations, as `encoding/json` writes them for Kubernetes'
//! `metav1.Time`, `metav1.MicroTime` and `metav1.Duration`.

use jiff::Timestamp;

/// `metav1.Time`: RFC 3339 in seconds (the real server keeps seconds only: `Time`'s
/// `Unmarshal` drops nanoseconds).
pub(crate) fn time(seconds: i64) -> Result<String, String> {
    let at = Timestamp::from_second(seconds).map_err(|e| e.to_string())?;
    Ok(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// `metav1.MicroTime`: RFC 3339 in microseconds.
pub(crate) fn micro_time(seconds: i64, nanos: i64) -> Result<String, String> {
    let nanos = i32::try_from(nanos).map_err(|e| e.to_string())?;
    let at = Timestamp::new(seconds, nanos).map_err(|e| e.to_string())?;
    Ok(at.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string())
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `150ms`, `0s`.
pub(crate) fn duration(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n == 0 {
        return "0s".to_owned();
    }
    if n < 1_000_000_000 {
        let (unit, scale) = match n {
            ..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", fraction(n, scale));
    }
    let (hours, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let seconds = fraction(rest, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// `n / scale` with the fraction's trailing zeros cut: `1.5`, `2`.
fn fraction(n: u64, scale: u64) -> String {
    let (whole, part) = (n / scale, n % scale);
    if part == 0 {
        return whole.to_string();
    }
    let digits = scale.ilog10() as usize;
    let part = format!("{part:0digits$}");
    format!("{whole}.{}", part.trim_end_matches('0'))
}

/// Go's `time.ParseDuration` for what `duration` writes: `1h2m3.5s`, `150ms`, `-2s`.
pub(crate) fn parse_duration(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    let nanos = total.round() as i64;
    Some(if negative { -nanos } else { nanos })
}
