//! BQL, the SQL-like query language of `GET /1/cloudQuery` (grammar in decisions.md), parsed by
//! hand into the same `query::Query` the REST parameters build.
//!
//! ```text
//! statement := SELECT items FROM class [WHERE cond] [GROUP BY paths] [HAVING cond]
//!              [LIMIT [n ,] n] [ORDER BY keys]            (LIMIT and ORDER BY in either order)
//! items     := item {, item}     item := * | path | count(*) | include path | fn(path)
//! fn        := sum | avg | average | max | min
//! cond      := and {OR and}      and := atom {AND atom}
//! atom      := ( cond ) | RELATED path TO value | path test
//! test      := (= | != | <> | < | <= | > | >=) value | LIKE string | REGEXP string
//!            | [NOT] IN ( value {, value} ) | [NOT] IN ( SELECT key FROM class [WHERE cond] )
//!            | IS [NOT] EXISTS | NEAR point [MAX number (MILES | KILOMETERS | KM | RADIANS)]
//!            | WITHIN point AND point
//! point     := value | [ lng , lat ]
//! value     := number | string | true | false | null | ? | date(string)
//!            | pointer(class, id) | geopoint(lng, lat) | file(url)
//! keys      := [-|+] path [ASC | DESC] {, ...}
//! ```
//!
//! Conditions become a `where` JSON object and go through `Filter::parse` like the REST form,
//! so both languages accept and reject the same queries. In `HAVING` and `ORDER BY`,
//! `count(*)` and `fn(col)` name the result columns (`_count`, `_sumCol`). `?` takes the next
//! element of `values` and may stand only where a value or a limit can. Errors name the byte
//! offset of the fault and answer 601.

mod error;
mod lexer;

use basalt_cluster::query::aggregate::{AggregateSpec, Metric};
use basalt_cluster::query::filter::Filter;
use basalt_cluster::query::SortKey;
use serde_json::{json, Map, Value};

use super::projection::parse_include;
use super::{Aggregation, Query};
pub use error::BqlError;
use lexer::{tokenize, Tok, Token};

/// Longest statement, in bytes.
pub const MAX_STATEMENT_BYTES: usize = 4096;
/// Most rows a statement returns.
pub const MAX_ROWS: usize = 1000;

/// A parsed statement: the query, and whether it selects `count(*)` (the answer then carries
/// `count`).
#[derive(Debug, Clone)]
pub struct Statement {
    pub query: Query,
    pub count: bool,
}

/// Parses `src` with `values` for its `?` placeholders.
pub fn parse(src: &str, values: &[Value]) -> Result<Statement, BqlError> {
    if src.len() > MAX_STATEMENT_BYTES {
        return Err(BqlError::new(
            MAX_STATEMENT_BYTES,
            format!("a statement has at most {MAX_STATEMENT_BYTES} bytes"),
        ));
    }
    let mut p = Parser {
        toks: tokenize(src)?,
        i: 0,
        values,
        used: 0,
    };
    let st = p.statement()?;
    p.expect_end()?;
    if p.used < values.len() {
        return Err(BqlError::new(
            src.len(),
            format!("{} values for {} placeholders", values.len(), p.used),
        ));
    }
    Ok(st)
}

const FUNCTIONS: [(&str, Metric); 5] = [
    ("sum", Metric::Sum),
    ("avg", Metric::Average),
    ("average", Metric::Average),
    ("max", Metric::Max),
    ("min", Metric::Min),
];

fn metric_named(name: &str) -> Option<Metric> {
    FUNCTIONS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, m)| *m)
}

/// Where a condition stands: `WHERE` reads object fields, `HAVING` result columns.
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    Where,
    Having,
}

struct Parser<'v> {
    toks: Vec<Token>,
    i: usize,
    values: &'v [Value],
    used: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.toks[self.i.min(self.toks.len() - 1)]
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.i + k).min(self.toks.len() - 1)].tok
    }

    fn pos(&self) -> usize {
        self.peek().pos
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.i < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, BqlError> {
        Err(BqlError::new(self.pos(), msg))
    }

    fn found(&self) -> String {
        match &self.peek().tok {
            Tok::Ident(s) | Tok::Quoted(s) => format!("{s:?}"),
            Tok::Num(n, _) => n.to_string(),
            Tok::Str(s) => format!("'{s}'"),
            Tok::Placeholder => "?".into(),
            Tok::Punct(p) => format!("{p:?}"),
            Tok::End => "the end".into(),
        }
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(s) if s.eq_ignore_ascii_case(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        let hit = self.is_kw(kw);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn expect_kw(&mut self, kw: &str) -> Result<(), BqlError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            self.err(format!(
                "expected {} but found {}",
                kw.to_uppercase(),
                self.found()
            ))
        }
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.peek().tok, Tok::Punct(q) if *q == p)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let hit = self.is_punct(p);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn expect_punct(&mut self, p: &str) -> Result<(), BqlError> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            self.err(format!("expected {p:?} but found {}", self.found()))
        }
    }

    fn expect_end(&self) -> Result<(), BqlError> {
        match self.peek().tok {
            Tok::End => Ok(()),
            _ => self.err(format!("unexpected {}", self.found())),
        }
    }

    /// An identifier or dot path (keywords are identifiers too where one is expected).
    fn path(&mut self) -> Result<String, BqlError> {
        match self.peek().tok.clone() {
            Tok::Ident(s) | Tok::Quoted(s) => {
                self.i += 1;
                Ok(s)
            }
            _ => self.err(format!("expected a column name but found {}", self.found())),
        }
    }

    fn statement(&mut self) -> Result<Statement, BqlError> {
        self.expect_kw("select")?;
        let mut keys = Vec::new();
        let mut includes = Vec::new();
        let mut spec = AggregateSpec::default();
        let mut count = false;
        loop {
            if self.eat_punct("*") {
                keys.push("*".to_string());
            } else if self.is_kw("count") && self.peek_at(1) == &Tok::Punct("(") {
                self.i += 2;
                self.expect_punct("*")?;
                self.expect_punct(")")?;
                count = true;
            } else if self.is_kw("include")
                && matches!(self.peek_at(1), Tok::Ident(_) | Tok::Quoted(_))
            {
                self.i += 1;
                includes.push(self.path()?);
            } else if let (Some(m), true) = (
                self.ident_text().and_then(metric_named),
                self.peek_at(1) == &Tok::Punct("("),
            ) {
                self.i += 2;
                let col = self.path()?;
                self.expect_punct(")")?;
                if !spec.metrics.contains(&(m, col.clone())) {
                    spec.metrics.push((m, col));
                }
            } else {
                keys.push(self.path()?);
            }
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_kw("from")?;
        let class = self.path()?;
        let mut query = Query {
            class,
            max_limit: Some(MAX_ROWS),
            ..Default::default()
        };
        if self.eat_kw("where") {
            let at = self.pos();
            let w = self.condition(Scope::Where)?;
            query.filter = to_filter(&w, at)?;
        }
        if self.eat_kw("group") {
            self.expect_kw("by")?;
            loop {
                spec.group_by.push(self.path()?);
                if !self.eat_punct(",") {
                    break;
                }
            }
        }
        let mut having = Filter::All;
        if self.eat_kw("having") {
            let at = self.pos();
            let h = self.condition(Scope::Having)?;
            having = to_filter(&h, at)?;
        }
        let (mut limited, mut ordered) = (false, false);
        loop {
            if !limited && self.eat_kw("limit") {
                let first = self.count_value()?;
                if self.eat_punct(",") {
                    query.skip = first;
                    query.limit = Some(self.count_value()?);
                } else {
                    query.limit = Some(first);
                }
                limited = true;
            } else if !ordered && self.eat_kw("order") {
                self.expect_kw("by")?;
                query.order = self.order_keys()?;
                ordered = true;
            } else {
                break;
            }
        }
        let aggregated = !spec.group_by.is_empty() || !spec.metrics.is_empty();
        if aggregated {
            spec.group_count = count;
            query.aggregation = Some(Aggregation { spec, having });
        } else {
            if having != Filter::All {
                return self.err("HAVING needs GROUP BY or an aggregate function");
            }
            query.count = count;
            // Only count(*): the count alone.
            if count && keys.is_empty() && includes.is_empty() {
                query.limit = Some(0);
            }
        }
        if !keys.iter().any(|k| k == "*") {
            query.keys = keys;
        }
        query.include =
            parse_include(&includes.join(",")).map_err(|e| BqlError::new(0, e.to_string()))?;
        Ok(Statement {
            query,
            count: count && !aggregated,
        })
    }

    fn ident_text(&self) -> Option<&str> {
        match &self.peek().tok {
            Tok::Ident(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// A non-negative integer or a `?` holding one (LIMIT).
    fn count_value(&mut self) -> Result<usize, BqlError> {
        let at = self.pos();
        let v = match self.bump().tok {
            Tok::Num(n, true) => json!(n),
            Tok::Placeholder => self.placeholder(at)?,
            _ => return Err(BqlError::new(at, "LIMIT needs a non-negative integer")),
        };
        v.as_f64()
            .filter(|n| *n >= 0.0 && n.fract() == 0.0 && *n <= u32::MAX as f64)
            .map(|n| n as usize)
            .ok_or_else(|| BqlError::new(at, "LIMIT needs a non-negative integer"))
    }

    fn placeholder(&mut self, at: usize) -> Result<Value, BqlError> {
        let v = self.values.get(self.used).cloned().ok_or_else(|| {
            BqlError::new(at, format!("no value for placeholder {}", self.used + 1))
        })?;
        self.used += 1;
        Ok(v)
    }

    fn order_keys(&mut self) -> Result<Vec<SortKey>, BqlError> {
        let mut out = Vec::new();
        loop {
            let mut descending = false;
            if self.eat_punct("-") {
                descending = true;
            } else {
                self.eat_punct("+");
            }
            let field = self.column(Scope::Having)?;
            if self.eat_kw("desc") {
                descending = true;
            } else {
                self.eat_kw("asc");
            }
            out.push(SortKey { field, descending });
            if !self.eat_punct(",") {
                return Ok(out);
            }
        }
    }

    /// A column: a path, or in `Having` scope also `count(*)` / `fn(col)` (result columns).
    fn column(&mut self, scope: Scope) -> Result<String, BqlError> {
        let call = self.peek_at(1) == &Tok::Punct("(");
        if call && scope == Scope::Having {
            if self.is_kw("count") {
                self.i += 2;
                self.expect_punct("*")?;
                self.expect_punct(")")?;
                return Ok("_count".into());
            }
            if let Some(m) = self.ident_text().and_then(metric_named) {
                self.i += 2;
                let col = self.path()?;
                self.expect_punct(")")?;
                return Ok(m.column_name(&col));
            }
        }
        if call {
            return self.err(format!("unexpected function {}", self.found()));
        }
        self.path()
    }

    fn condition(&mut self, scope: Scope) -> Result<Value, BqlError> {
        let mut parts = vec![self.conjunction(scope)?];
        while self.eat_kw("or") {
            parts.push(self.conjunction(scope)?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            json!({"$or": parts})
        })
    }

    fn conjunction(&mut self, scope: Scope) -> Result<Value, BqlError> {
        let mut parts = vec![self.atom(scope)?];
        while self.eat_kw("and") {
            parts.push(self.atom(scope)?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            json!({"$and": parts})
        })
    }

    fn atom(&mut self, scope: Scope) -> Result<Value, BqlError> {
        if self.eat_punct("(") {
            let c = self.condition(scope)?;
            self.expect_punct(")")?;
            return Ok(c);
        }
        if scope == Scope::Where && self.is_kw("related") {
            self.i += 1;
            let key = self.path()?;
            self.expect_kw("to")?;
            let at = self.pos();
            let object = self.value()?;
            if object.get("__type").and_then(Value::as_str) != Some("Pointer") {
                return Err(BqlError::new(
                    at,
                    "RELATED ... TO needs a pointer(class, id)",
                ));
            }
            return Ok(json!({"$relatedTo": {"object": object, "key": key}}));
        }
        let path = self.column(scope)?;
        let test = self.test(scope)?;
        let mut m = Map::new();
        m.insert(path, test);
        Ok(Value::Object(m))
    }

    /// The condition on one column, as the value of its `where` key.
    fn test(&mut self, scope: Scope) -> Result<Value, BqlError> {
        let at = self.pos();
        if let Tok::Punct(op) = self.peek().tok.clone() {
            let op = match op {
                "=" => None,
                "!=" | "<>" => Some("$ne"),
                "<" => Some("$lt"),
                "<=" => Some("$lte"),
                ">" => Some("$gt"),
                ">=" => Some("$gte"),
                _ => return self.err(format!("expected an operator but found {}", self.found())),
            };
            self.i += 1;
            let v = self.value()?;
            return Ok(match op {
                // A value that itself looks like an operator object stays an equality.
                None if v
                    .as_object()
                    .is_some_and(|m| m.keys().any(|k| k.starts_with('$'))) =>
                {
                    json!({"$in": [v]})
                }
                None => v,
                Some(op) => json!({ op: v }),
            });
        }
        if self.eat_kw("like") {
            let pattern = self.string_value()?;
            return Ok(json!({"$regex": like_to_regex(&pattern)}));
        }
        if self.eat_kw("regexp") {
            let pattern = self.string_value()?;
            return Ok(json!({"$regex": pattern}));
        }
        if self.eat_kw("is") {
            let not = self.eat_kw("not");
            self.expect_kw("exists")?;
            return Ok(json!({"$exists": !not}));
        }
        let not = self.eat_kw("not");
        if self.eat_kw("in") {
            self.expect_punct("(")?;
            let t = if scope == Scope::Where && self.is_kw("select") {
                self.sub_select(not)?
            } else {
                let mut items = vec![self.value()?];
                while self.eat_punct(",") {
                    items.push(self.value()?);
                }
                json!({ if not { "$nin" } else { "$in" }: items })
            };
            self.expect_punct(")")?;
            return Ok(t);
        }
        if not {
            return self.err(format!("expected IN after NOT but found {}", self.found()));
        }
        if scope == Scope::Where && self.eat_kw("near") {
            let point = self.point()?;
            let mut t = json!({"$nearSphere": point});
            if self.eat_kw("max") {
                let d = self.value()?;
                let unit_at = self.pos();
                let unit = self.path()?.to_ascii_lowercase();
                let key = match unit.as_str() {
                    "miles" | "mi" => "$maxDistanceInMiles",
                    "kilometers" | "km" => "$maxDistanceInKilometers",
                    "radians" => "$maxDistanceInRadians",
                    _ => {
                        return Err(BqlError::new(
                            unit_at,
                            "expected MILES, KILOMETERS or RADIANS",
                        ))
                    }
                };
                t[key] = d;
            }
            return Ok(t);
        }
        if scope == Scope::Where && self.eat_kw("within") {
            let sw = self.point()?;
            self.expect_kw("and")?;
            let ne = self.point()?;
            return Ok(json!({"$within": {"$box": [sw, ne]}}));
        }
        Err(BqlError::new(
            at,
            format!("expected a comparison but found {}", self.found()),
        ))
    }

    /// `SELECT key FROM class [WHERE cond]` inside `IN ( ... )`: the objects themselves (`*`
    /// or `objectId`, for pointer columns) or one key's values.
    fn sub_select(&mut self, not: bool) -> Result<Value, BqlError> {
        self.expect_kw("select")?;
        let key = if self.eat_punct("*") {
            "*".to_string()
        } else {
            self.path()?
        };
        self.expect_kw("from")?;
        let class = self.path()?;
        let mut sub = json!({"className": class});
        if self.eat_kw("where") {
            sub["where"] = self.condition(Scope::Where)?;
        }
        Ok(if key == "*" || key == "objectId" {
            json!({ if not { "$notInQuery" } else { "$inQuery" }: sub })
        } else {
            json!({ if not { "$dontSelect" } else { "$select" }: {"query": sub, "key": key} })
        })
    }

    /// A geo point: any value (`geopoint(lng, lat)`, `?`), or the bracket form `[lng, lat]`.
    fn point(&mut self) -> Result<Value, BqlError> {
        let at = self.pos();
        if !self.eat_punct("[") {
            return self.value();
        }
        let lng = self.value()?;
        self.expect_punct(",")?;
        let lat = self.value()?;
        self.expect_punct("]")?;
        typed("geopoint", &[lng, lat])
            .ok_or_else(|| BqlError::new(at, "a point is [longitude, latitude] in numbers"))
    }

    fn string_value(&mut self) -> Result<String, BqlError> {
        let at = self.pos();
        match self.value()? {
            Value::String(s) => Ok(s),
            _ => Err(BqlError::new(at, "expected a string")),
        }
    }

    fn value(&mut self) -> Result<Value, BqlError> {
        let t = self.bump();
        let at = t.pos;
        Ok(match t.tok {
            Tok::Num(n, integral) => number(n, integral),
            Tok::Punct("-") => match self.bump().tok {
                Tok::Num(n, integral) => number(-n, integral),
                _ => return Err(BqlError::new(at, "expected a number after -")),
            },
            Tok::Str(s) => Value::String(s),
            Tok::Placeholder => self.placeholder(at)?,
            Tok::Ident(word) => {
                let lower = word.to_ascii_lowercase();
                match lower.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "null" => Value::Null,
                    "date" | "pointer" | "geopoint" | "file" => {
                        self.expect_punct("(")?;
                        let mut args = vec![self.value()?];
                        while self.eat_punct(",") {
                            args.push(self.value()?);
                        }
                        self.expect_punct(")")?;
                        typed(&lower, &args).ok_or_else(|| {
                            BqlError::new(at, format!("bad arguments to {lower}()"))
                        })?
                    }
                    _ => {
                        return Err(BqlError::new(
                            at,
                            format!("expected a value but found {word:?}"),
                        ))
                    }
                }
            }
            _ => {
                self.i -= 1;
                return self.err(format!("expected a value but found {}", self.found()));
            }
        })
    }
}

fn number(n: f64, integral: bool) -> Value {
    if integral && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        json!(n)
    }
}

/// The typed value a function builds: `date(iso)`, `pointer(class, id)`, `geopoint(lng, lat)`,
/// `file(url)`.
fn typed(name: &str, args: &[Value]) -> Option<Value> {
    match (name, args) {
        ("date", [Value::String(iso)]) => Some(json!({"__type": "Date", "iso": iso})),
        ("pointer", [Value::String(class), Value::String(id)]) => {
            Some(json!({"__type": "Pointer", "className": class, "objectId": id}))
        }
        ("geopoint", [lng, lat]) => Some(
            json!({"__type": "GeoPoint", "latitude": lat.as_f64()?, "longitude": lng.as_f64()?}),
        ),
        ("file", [Value::String(url)]) => Some(json!({"__type": "File", "url": url})),
        _ => None,
    }
}

/// A LIKE pattern (`%` any run, `_` one character) as an anchored regex.
fn like_to_regex(pattern: &str) -> String {
    let mut out = String::from("^");
    for c in pattern.chars() {
        match c {
            '%' => out.push_str(".*"),
            '_' => out.push('.'),
            c => out.push_str(&regex_syntax_escape(c)),
        }
    }
    out.push('$');
    out
}

fn regex_syntax_escape(c: char) -> String {
    if "\\.+*?()|[]{}^$#&-~".contains(c) {
        format!("\\{c}")
    } else {
        c.to_string()
    }
}

fn to_filter(w: &Value, at: usize) -> Result<Filter, BqlError> {
    let m = w
        .as_object()
        .ok_or_else(|| BqlError::new(at, "bad condition"))?;
    Filter::parse(m).map_err(|e| BqlError::new(at, e.to_string()))
}

#[cfg(test)]
mod tests;
