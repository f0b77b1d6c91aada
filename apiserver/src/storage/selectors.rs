//! Label and field selectors, parsed from query strings and matched against stored objects.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, and
//! `k>n` / `k<n` for integers, comma-separated (all must hold). Field selectors: `=`, `==` and
//! `!=` on `metadata.name`, `metadata.namespace`, and on `spec.nodeName` and `status.phase`
//! where the kind's field labels name them (a pod's: see `Strategy::field_labels`); any other
//! field is refused with 400, as the real server does.

use std::collections::BTreeMap;

use crate::model::status::{ApiError, ApiResult};

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// A token of a label selector, as Kubernetes' selector lexer reads them.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Identifier(String),
    /// `!`
    Not,
    /// `!=`
    NotEquals,
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `>`
    GreaterThan,
    /// `<`
    LessThan,
    /// `in`
    In,
    /// `notin`
    NotIn,
    /// `(`
    Open,
    /// `)`
    Close,
    /// `,`
    Comma,
    /// Special characters that form no operator (`=!` after `=`, say), with the lexer's
    /// message.
    Error(String),
    End,
}

impl Token {
    /// The text the real server quotes in its messages (`found '...'`).
    fn literal(&self) -> String {
        match self {
            Token::Identifier(s) | Token::Error(s) => s.clone(),
            Token::Not => "!".into(),
            Token::NotEquals => "!=".into(),
            Token::Equals => "=".into(),
            Token::DoubleEquals => "==".into(),
            Token::GreaterThan => ">".into(),
            Token::LessThan => "<".into(),
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Comma => ",".into(),
            Token::End => String::new(),
        }
    }

    /// Where a value may stand, `in` and `notin` are values like any other word.
    fn as_value(&self) -> Token {
        match self {
            Token::In => Token::Identifier("in".into()),
            Token::NotIn => Token::Identifier("notin".into()),
            other => other.clone(),
        }
    }
}

fn special(c: char) -> bool {
    "=!(),><".contains(c)
}

fn operator(text: &str) -> Option<Token> {
    Some(match text {
        "!" => Token::Not,
        "!=" => Token::NotEquals,
        "=" => Token::Equals,
        "==" => Token::DoubleEquals,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "(" => Token::Open,
        ")" => Token::Close,
        "," => Token::Comma,
        _ => return None,
    })
}

/// Splits a label selector into tokens: words end at whitespace or a special character; a
/// run of special characters is read as the longest operator it starts with.
fn tokens(selector: &str) -> Vec<Token> {
    let chars: Vec<char> = selector.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i == chars.len() {
            out.push(Token::End);
            return out;
        }
        if special(chars[i]) {
            let (mut buffer, mut last) = (String::new(), None);
            while i < chars.len() && special(chars[i]) {
                buffer.push(chars[i]);
                match operator(&buffer) {
                    Some(token) => last = Some(token),
                    None if last.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            out.push(last.unwrap_or_else(|| {
                Token::Error(format!("error expected: keyword found '{buffer}'"))
            }));
        } else {
            let start = i;
            while i < chars.len() && !special(chars[i]) && !chars[i].is_whitespace() {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word),
            });
        }
    }
}

/// The parser of one label selector, with the real server's messages (Kubernetes 1.36's).
struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Token {
        self.tokens[self.at.min(self.tokens.len() - 1)].as_value()
    }

    fn next(&mut self, value: bool) -> Token {
        let token = self.tokens[self.at.min(self.tokens.len() - 1)].clone();
        self.at += 1;
        if value { token.as_value() } else { token }
    }

    fn requirements(&mut self) -> Result<Vec<Requirement>, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Token::Identifier(_) | Token::Not => {
                    let requirement = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    out.push(requirement);
                    match self.next(true) {
                        Token::End => return Ok(out),
                        Token::Comma => {
                            let after = self.peek();
                            if !matches!(after, Token::Identifier(_) | Token::Not) {
                                let found = after.literal();
                                return Err(format!(
                                    "found '{found}', expected: identifier after ','"
                                ));
                            }
                        }
                        other => {
                            let found = other.literal();
                            return Err(format!(
                                "found '{found}', expected: ',' or 'end of string'"
                            ));
                        }
                    }
                }
                Token::End => return Ok(out),
                other => {
                    let found = other.literal();
                    return Err(format!(
                        "found '{found}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut negated = false;
        let mut token = self.next(true);
        if token == Token::Not {
            negated = true;
            token = self.next(true);
        }
        let Token::Identifier(key) = token else {
            return Err(format!("found '{}', expected: identifier", token.literal()));
        };
        validate_key(&key)?;
        if negated {
            return Ok(Requirement::DoesNotExist(key));
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(Requirement::Exists(key));
        }
        let op = self.next(false);
        match op {
            Token::In | Token::NotIn => {
                let values = self.set()?;
                for (i, v) in values.iter().enumerate() {
                    validate_value(&key, i, v)?;
                }
                Ok(if op == Token::In {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
            Token::Equals | Token::DoubleEquals | Token::NotEquals => {
                let value = self.exact()?;
                validate_value(&key, 0, &value)?;
                Ok(if op == Token::NotEquals {
                    Requirement::NotEquals(key, value)
                } else {
                    Requirement::Equals(key, value)
                })
            }
            Token::GreaterThan | Token::LessThan => {
                let value = self.exact()?;
                let n: i64 = value.parse().map_err(|_| {
                    format!(
                        "values[0]: Invalid value: \"{value}\": for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                })?;
                Ok(if op == Token::GreaterThan {
                    Requirement::GreaterThan(key, n)
                } else {
                    Requirement::LessThan(key, n)
                })
            }
            other => {
                Err(format!("found '{}', expected: in, notin, =, ==, !=, gt, lt", other.literal()))
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`: a word, or nothing.
    fn exact(&mut self) -> Result<String, String> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next(true) {
            Token::Identifier(value) => Ok(value),
            other => Err(format!("found '{}', expected: identifier", other.literal())),
        }
    }

    /// `( v1, v2, … )`, empty values allowed; sorted and deduplicated, as a set.
    fn set(&mut self) -> Result<Vec<String>, String> {
        let open = self.next(true);
        if open != Token::Open {
            return Err(format!("found '{}' expected: '('", open.literal()));
        }
        let mut values = std::collections::BTreeSet::new();
        match self.peek() {
            Token::Close => {
                self.next(true);
                values.insert(String::new());
            }
            Token::Identifier(_) | Token::Comma => loop {
                match self.next(true) {
                    Token::Identifier(value) => {
                        values.insert(value);
                        match self.peek() {
                            Token::Comma => {}
                            Token::Close => {
                                self.next(true);
                                break;
                            }
                            other => {
                                let found = other.literal();
                                return Err(format!("found '{found}', expected: ',' or ')'"));
                            }
                        }
                    }
                    Token::Comma => {
                        if values.is_empty() {
                            values.insert(String::new());
                        }
                        match self.peek() {
                            Token::Close => {
                                values.insert(String::new());
                                self.next(true);
                                break;
                            }
                            Token::Comma => {
                                self.next(true);
                                values.insert(String::new());
                            }
                            _ => {}
                        }
                    }
                    other => {
                        let found = other.literal();
                        return Err(format!("found '{found}', expected: ',', or identifier"));
                    }
                }
            },
            other => {
                let found = other.literal();
                return Err(format!("found '{found}', expected: ',', ')' or identifier"));
            }
        }
        Ok(values.into_iter().collect())
    }
}

const NAME_FORMAT: &str = "consist of alphanumeric characters, '-', '_' or '.', and must start \
    and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex \
    used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the name part of a qualified name.
fn is_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// A DNS-1123 subdomain: lowercase labels of letters, digits and `-`, joined by dots.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name part of at most 63
/// characters; the real server's messages otherwise.
fn validate_key(key: &str) -> Result<(), String> {
    let invalid = |why: String| format!("<nil>: Invalid value: \"{key}\": {why}");
    let parts: Vec<&str> = key.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return Err(invalid(format!(
                "a valid label key must {NAME_FORMAT} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )));
        }
    };
    let mut errors = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".to_owned());
        } else if !is_dns_subdomain(prefix) {
            errors.push(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    .to_owned(),
            );
        }
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else {
        if name.len() > 63 {
            errors.push("name part must be no more than 63 bytes".to_owned());
        }
        if !is_name_part(name) {
            errors.push(format!("name part must {NAME_FORMAT}"));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(invalid(errors.join("; "))) }
}

/// A label value: empty, or at most 63 characters of the name part's form.
fn validate_value(key: &str, index: usize, value: &str) -> Result<(), String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 bytes".to_owned());
    }
    if !value.is_empty() && !is_name_part(value) {
        errors.push(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                .to_owned(),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("values[{index}][{key}]: Invalid value: \"{value}\": {}", errors.join("; ")))
    }
}

impl LabelSelector {
    /// Parses a `labelSelector` query value as the real server does; a malformed one is a
    /// 400 with its message.
    pub(crate) fn parse(selector: &str) -> ApiResult<Self> {
        let mut parser = Parser { tokens: tokens(selector), at: 0 };
        parser.requirements().map(Self).map_err(ApiError::bad_request)
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|req| match req {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::GreaterThan(k, n) => {
                labels.get(k).and_then(|l| l.parse::<i64>().ok()).is_some_and(|l| l > *n)
            }
            Requirement::LessThan(k, n) => {
                labels.get(k).and_then(|l| l.parse::<i64>().ok()).is_some_and(|l| l < *n)
            }
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The fields a field selector can name, read off an object when it is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) name: String,
    pub(crate) namespace: String,
    /// `metadata.uid`, which shard selectors hash.
    pub(crate) uid: String,
    /// `spec.nodeName`, a pod's field label.
    pub(crate) node_name: Option<String>,
    /// `status.phase`, a pod's field label.
    pub(crate) phase: Option<String>,
}

/// A field selector's terms: split on commas not escaped with `\\`.
fn split_unescaped_commas(selector: &str) -> Vec<&str> {
    let (mut parts, mut start, mut escaped) = (Vec::new(), 0, false);
    for (i, c) in selector.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts
}

/// `field OP value` at the first operator (`!=`, `==` or `=`), as the real server splits a
/// term: the value may still hold operator characters, refused by [`unescape`].
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], equal, value));
            }
        }
    }
    None
}

/// A field selector value with its escapes (`\\\\`, `\\,` and `\\=`) undone; an unescaped `=` or
/// `,`, or another escape, is the real server's error.
fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence: \\{e}")),
                None => return Err("invalid escape sequence: \\".to_owned()),
            },
            '=' | ',' => return Err(format!("unescaped character in value: {}", c as u32)),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(FieldName, bool, String)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldName {
    Name,
    Namespace,
    NodeName,
    Phase,
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value; `labels` are the fields the kind adds to
    /// `metadata.name` and `metadata.namespace` (of those the store indexes).
    pub(crate) fn parse(selector: &str, labels: &[&str]) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_unescaped_commas(selector).into_iter().filter(|p| !p.is_empty()) {
            let Some((field, equal, value)) = split_term(part) else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            let value = unescape(value)
                .map_err(|why| ApiError::bad_request(format!("invalid field selector: {why}")))?;
            let name = match field.trim() {
                "metadata.name" => FieldName::Name,
                "metadata.namespace" => FieldName::Namespace,
                "spec.nodeName" if labels.contains(&"spec.nodeName") => FieldName::NodeName,
                "status.phase" if labels.contains(&"status.phase") => FieldName::Phase,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {other}"
                    )));
                }
            };
            reqs.push((name, equal, value));
        }
        Ok(Self(reqs))
    }

    /// Whether `fields` satisfy every requirement.
    pub(crate) fn matches(&self, fields: &Fields) -> bool {
        self.0.iter().all(|(name, equal, value)| {
            let actual = match name {
                FieldName::Name => fields.name.as_str(),
                FieldName::Namespace => fields.namespace.as_str(),
                FieldName::NodeName => fields.node_name.as_deref().unwrap_or(""),
                FieldName::Phase => fields.phase.as_deref().unwrap_or(""),
            };
            (actual == value) == *equal
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod's field labels.
    const POD: &[&str] = &["spec.nodeName", "status.phase"];

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web,db)",
            "x notin (a)",
            "app",
            "!x",
            "app=web,tier in (front)",
            "n>4",
            "n<6",
            "tier notin (back, mid)",
            "",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&l), "{s} should match");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web)",
            "x",
            "!app",
            "n>5",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&l), "{s} should not match");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(LabelSelector::parse("app=web,").is_err());
        assert!(LabelSelector::parse("x in (a,,b),y,z notin ()").is_ok());
        assert!(LabelSelector::parse("v in (in, notin)").unwrap().matches(&labels(&[("v", "in")])));
    }

    /// Each message as kube-apiserver 1.36.2 answered it (its 400's `message`).
    #[test]
    fn malformed_label_selectors_get_the_real_servers_messages() {
        let cases = [
            ("a===b", "unable to parse requirement: found '=', expected: identifier"),
            ("a in b", "unable to parse requirement: found 'b' expected: '('"),
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("a=b,", "found '', expected: identifier after ','"),
            (",a", "found ',', expected: !, identifier, or 'end of string'"),
            ("a=(b)", "unable to parse requirement: found '(', expected: identifier"),
            ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
            ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            (
                "a>b",
                "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
            ("a,,b", "found ',', expected: identifier after ','"),
            ("a=b)", "found ')', expected: ',' or 'end of string'"),
            (
                "a!b",
                "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("===", "found '==', expected: !, identifier, or 'end of string'"),
            (
                "a=b$",
                "unable to parse requirement: values[0][a]: Invalid value: \"b$\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
            (
                "-a=b",
                "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                "a/b/c=d",
                "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ),
        ];
        for (selector, message) in cases {
            let e = LabelSelector::parse(selector).unwrap_err();
            assert_eq!((e.code.as_u16(), e.message.as_str()), (400, message), "{selector}");
        }
        let long = format!("a={}", "x".repeat(64));
        let e = LabelSelector::parse(&long).unwrap_err();
        assert!(e.message.ends_with("\": must be no more than 63 bytes"), "{}", e.message);
        for fine in ["a>1", "a in ()", "a notin (x,,y)", "app=web"] {
            assert!(LabelSelector::parse(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn malformed_field_selectors_get_the_real_servers_messages() {
        let cases = [
            ("metadata.name===b", "invalid field selector: unescaped character in value: 61"),
            ("metadata.name==a=b", "invalid field selector: unescaped character in value: 61"),
            (
                "metadata.name",
                "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
            ),
            ("metadata.name=\\x", "invalid field selector: invalid escape sequence: \\x"),
            ("spec.bogus=1", "field label not supported: spec.bogus"),
        ];
        for (selector, message) in cases {
            let e = FieldSelector::parse(selector, POD).unwrap_err();
            assert_eq!((e.code.as_u16(), e.message.as_str()), (400, message), "{selector}");
        }
        let f = Fields { name: "a,b".into(), ..Fields::default() };
        assert!(FieldSelector::parse("metadata.name=a\\,b", POD).unwrap().matches(&f));
        for fine in ["metadata.name=a!b", "metadata.name=a,", "metadata.name!=a,,"] {
            assert!(FieldSelector::parse(fine, POD).is_ok(), "{fine}");
        }
    }

    #[test]
    fn field_selector_fields() {
        let f = Fields {
            name: "p".into(),
            namespace: "default".into(),
            node_name: Some("n1".into()),
            phase: Some("Running".into()),
            ..Fields::default()
        };
        assert!(
            FieldSelector::parse("metadata.name=p,status.phase==Running", POD).unwrap().matches(&f)
        );
        assert!(FieldSelector::parse("spec.nodeName!=n2", POD).unwrap().matches(&f));
        assert!(!FieldSelector::parse("metadata.namespace=kube-system", POD).unwrap().matches(&f));
        assert!(FieldSelector::parse("status.phase=Running", &[]).is_err(), "pods only");
        assert!(FieldSelector::parse("spec.foo=bar", POD).is_err());
    }
}
