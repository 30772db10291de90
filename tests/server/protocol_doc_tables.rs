//! `docs/protocol.md` read as data, for the tests that hold the server to it: the API sections
//! of section 5 with their keys, each section's request and response field tables (which fields,
//! of which wire type, from which version), the error codes whose error body has details
//! (section 4), and a walker that splits a body into a table's fields.
//!
//! Why parse the prose document: it is the contract clients are written from (the Python
//! client in `tools/pyclient` was), so a layout the server writes must be the one the
//! document's tables give, field by field; hand-written expectations would only say what the
//! tests' author believed.

use std::collections::BTreeMap;

use crate::support::doc_examples::PROTOCOL_DOC;

/// One API section of section 5 (`### 5.N Title (key K)`), with its text up to the next heading.
#[derive(Debug, Clone)]
pub struct ApiSection {
    /// The heading, without `### `.
    pub title: String,
    /// Every `(key K)` of the heading (sections such as 5.19 describe several APIs).
    pub keys: Vec<u16>,
    /// The lines after the heading.
    pub lines: Vec<String>,
}

/// The wire types of the document's section 1, as the tables name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    U8,
    U16,
    U32,
    U64,
    I16,
    I64,
    U128,
    String16,
    Bytes32,
    TopicConfig,
    Node,
    Nodes,
}

impl WireType {
    fn parse(cell: &str) -> Option<WireType> {
        Some(match cell.trim().trim_matches('`') {
            "u8" => WireType::U8,
            "u16" => WireType::U16,
            "u32" => WireType::U32,
            "u64" => WireType::U64,
            "i16" => WireType::I16,
            "i64" => WireType::I64,
            "u128" => WireType::U128,
            "string16" => WireType::String16,
            "bytes32" => WireType::Bytes32,
            "TopicConfig" => WireType::TopicConfig,
            "node" => WireType::Node,
            "nodes" => WireType::Nodes,
            _ => return None,
        })
    }

    /// The size of a fixed-size type.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            WireType::U8 => Some(1),
            WireType::U16 | WireType::I16 => Some(2),
            WireType::U32 | WireType::Node => Some(4),
            WireType::U64 | WireType::I64 => Some(8),
            WireType::U128 => Some(16),
            WireType::TopicConfig => Some(33),
            WireType::String16 | WireType::Bytes32 | WireType::Nodes => None,
        }
    }
}

/// One row of a field table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's name, without backticks.
    pub name: String,
    /// Its wire type.
    pub wire: WireType,
    /// The first version that has it (`**version N only**` in its meaning; else 0).
    pub since: u16,
}

/// What a section says about a request or response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `... body: empty.`
    Empty,
    /// A table of fields of known types, in wire order.
    Fields {
        fields: Vec<Field>,
        /// The sizes the line above the table states: `(24 bytes; 32 in version 1)` gives
        /// `[(0, 24), (1, 32)]`.
        stated_sizes: Vec<(u16, usize)>,
    },
    /// Something this parser does not split into fields (repeated entries, prose); the reason.
    Other(String),
}

impl Layout {
    /// The fields a body of `version` has, in order (`None` unless a field table).
    pub fn fields_of(&self, version: u16) -> Option<Vec<Field>> {
        match self {
            Layout::Empty => Some(Vec::new()),
            Layout::Fields { fields, .. } => Some(
                fields
                    .iter()
                    .filter(|field| field.since <= version)
                    .cloned()
                    .collect(),
            ),
            Layout::Other(_) => None,
        }
    }
}

/// Every API section of section 5, in document order.
pub fn api_sections() -> Vec<ApiSection> {
    let mut sections: Vec<ApiSection> = Vec::new();
    let mut current: Option<ApiSection> = None;
    for line in PROTOCOL_DOC.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            sections.extend(current.take());
            let title = line.trim_start_matches('#').trim();
            let keys = keys_in(title);
            if title.starts_with("5.") && !keys.is_empty() {
                current = Some(ApiSection {
                    title: title.to_owned(),
                    keys,
                    lines: Vec::new(),
                });
            }
            continue;
        }
        if let Some(section) = current.as_mut() {
            section.lines.push(line.to_owned());
        }
    }
    sections.extend(current);
    sections
}

/// The section describing `api_key`.
pub fn section_of(api_key: u16) -> ApiSection {
    api_sections()
        .into_iter()
        .find(|section| section.keys.contains(&api_key))
        .unwrap_or_else(|| panic!("docs/protocol.md has no section for key {api_key}"))
}

fn keys_in(title: &str) -> Vec<u16> {
    title
        .split("(key ")
        .skip(1)
        .filter_map(|rest| rest.split(')').next()?.trim().parse().ok())
        .collect()
}

impl ApiSection {
    /// The section's text as one string.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// The request body's layout.
    pub fn request(&self) -> Layout {
        self.layout("Request body")
    }

    /// The response body's layout.
    pub fn response(&self) -> Layout {
        self.layout("Response body")
    }

    fn layout(&self, which: &str) -> Layout {
        if self.keys.len() != 1 {
            return Layout::Other(format!("{} describes several APIs in prose", self.title));
        }
        let Some(at) = self.lines.iter().position(|line| line.starts_with(which)) else {
            return Layout::Other(format!("{}: no '{which}' line", self.title));
        };
        let intro = &self.lines[at];
        let said = intro[which.len()..].trim_start();
        if said.starts_with(": empty") {
            return Layout::Empty;
        }
        if !said.ends_with(':') {
            return Layout::Other(format!("{}: {intro}", self.title));
        }
        let stated_sizes = stated_sizes(said);
        let table: Vec<&String> = self.lines[at + 1..]
            .iter()
            .skip_while(|line| line.trim().is_empty())
            .take_while(|line| line.starts_with('|'))
            .collect();
        let [header, _separator, rows @ ..] = table.as_slice() else {
            return Layout::Other(format!("{}: no table after '{intro}'", self.title));
        };
        let columns = cells(header);
        let column = |name: &str| {
            columns
                .iter()
                .position(|cell| cell == name)
                .unwrap_or_else(|| panic!("{}: a table without a '{name}' column", self.title))
        };
        let (type_at, field_at, meaning_at) = (column("type"), column("field"), column("meaning"));
        let mut fields = Vec::new();
        for row in rows {
            let cells = cells(row);
            let Some(wire) = WireType::parse(&cells[type_at]) else {
                return Layout::Other(format!(
                    "{}: field {} of type '{}'",
                    self.title, cells[field_at], cells[type_at]
                ));
            };
            fields.push(Field {
                name: cells[field_at].trim_matches('`').to_owned(),
                wire,
                since: since_version(&cells[meaning_at]),
            });
        }
        Layout::Fields {
            fields,
            stated_sizes,
        }
    }
}

fn cells(row: &str) -> Vec<String> {
    row.trim()
        .trim_matches('|')
        .split('|')
        .map(|cell| cell.trim().to_owned())
        .collect()
}

/// `**version N only**` in a meaning: the field exists from version N on.
fn since_version(meaning: &str) -> u16 {
    meaning
        .split("**version ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// `(24 bytes; 32 in version 1):` -> `[(0, 24), (1, 32)]`; `(10 bytes):` -> `[(0, 10)]`.
fn stated_sizes(said: &str) -> Vec<(u16, usize)> {
    let Some(inside) = said
        .strip_prefix('(')
        .and_then(|rest| rest.split(')').next())
    else {
        return Vec::new();
    };
    inside
        .split(';')
        .filter_map(|part| {
            let words: Vec<&str> = part.split_whitespace().collect();
            match words.as_slice() {
                [size, "bytes"] => Some((0, size.parse().ok()?)),
                [size, "in", "version", version] => {
                    Some((version.parse().ok()?, size.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

/// The error codes whose error body carries details after `current_epoch`: the first column of
/// section 4's details table.
pub fn codes_with_details() -> Vec<String> {
    let start = PROTOCOL_DOC
        .find("| code                  | details |")
        .expect("section 4's details table");
    PROTOCOL_DOC[start..]
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| cells(line)[0].trim_matches('`').to_owned())
        .collect()
}

/// A field's value as read from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Any integer type, `node` included.
    Integer(i128),
    /// A `string16`'s or `bytes32`'s bytes, a `TopicConfig`'s 33 bytes, or a `nodes` list's.
    Bytes(Vec<u8>),
}

/// Splits `body` into `fields`, in order; `Err` says which field did not fit, or how many bytes
/// were left after the last one.
pub fn walk(fields: &[Field], body: &[u8]) -> Result<BTreeMap<String, Value>, String> {
    let mut values = BTreeMap::new();
    let mut at = 0usize;
    let take = |at: &mut usize, len: usize, name: &str| -> Result<Vec<u8>, String> {
        let bytes = body
            .get(*at..*at + len)
            .ok_or_else(|| {
                format!(
                    "the body ends inside {name} (at byte {at} of {})",
                    body.len()
                )
            })?
            .to_vec();
        *at += len;
        Ok(bytes)
    };
    for field in fields {
        let name = field.name.as_str();
        let integer = |bytes: Vec<u8>, signed: bool| {
            let mut value: i128 = 0;
            for byte in &bytes {
                value = (value << 8) | i128::from(*byte);
            }
            if signed && bytes[0] & 0x80 != 0 {
                value -= 1i128 << (8 * bytes.len());
            }
            Value::Integer(value)
        };
        let value = match field.wire {
            WireType::I16 | WireType::I64 => {
                integer(take(&mut at, field.wire.fixed_size().unwrap(), name)?, true)
            }
            WireType::TopicConfig => Value::Bytes(take(&mut at, 33, name)?),
            WireType::String16 => {
                let len = take(&mut at, 2, name)?;
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                Value::Bytes(take(&mut at, len, name)?)
            }
            WireType::Bytes32 => {
                let len = take(&mut at, 4, name)?;
                let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                Value::Bytes(take(&mut at, len, name)?)
            }
            WireType::Nodes => {
                let count = take(&mut at, 2, name)?;
                let count = usize::from(u16::from_be_bytes([count[0], count[1]]));
                Value::Bytes(take(&mut at, 4 * count, name)?)
            }
            fixed => integer(take(&mut at, fixed.fixed_size().unwrap(), name)?, false),
        };
        values.insert(field.name.clone(), value);
    }
    if at != body.len() {
        return Err(format!(
            "{} bytes left after the last field ({:?})",
            body.len() - at,
            fields.last().map(|field| &field.name)
        ));
    }
    Ok(values)
}

/// The parser reads the tables it is meant for: Fetch's version-1 fields, ListOffsets'
/// stated sizes, the empty bodies, and the codes with details.
#[test]
fn the_document_parses_as_the_tests_expect() {
    let fetch = section_of(7).response();
    let names: Vec<(String, u16)> = fetch
        .fields_of(1)
        .unwrap()
        .into_iter()
        .map(|field| (field.name, field.since))
        .collect();
    assert_eq!(
        names,
        [
            ("high_watermark".to_owned(), 0),
            ("log_start_offset".to_owned(), 0),
            ("batches".to_owned(), 0),
            ("last_stable_offset".to_owned(), 1),
            ("next_offset".to_owned(), 1),
        ]
    );
    assert_eq!(fetch.fields_of(0).unwrap().len(), 3);
    let Layout::Fields { stated_sizes, .. } = section_of(8).response() else {
        panic!("ListOffsets has a response table");
    };
    assert_eq!(stated_sizes, [(0, 24), (1, 32)]);
    assert_eq!(section_of(10).response(), Layout::Empty);
    assert_eq!(section_of(8).request().fields_of(1).unwrap().len(), 3);
    assert!(matches!(section_of(2).response(), Layout::Other(_)));
    assert_eq!(
        codes_with_details(),
        [
            "LEASE_HELD",
            "LEASE_LOST",
            "OFFSET_OUT_OF_RANGE",
            "NOT_LEADER"
        ]
    );
}
