//! One way to speak to either database: statements are written once, with `?1`-style
//! placeholders, and values and rows go through [`V`], so every query in `db/mod.rs` runs on
//! SQLite (one host) and PostgreSQL (several hosts sharing a queue) alike. Written by hand
//! because the two drivers (rusqlite, postgres) share no trait, and an ORM would be more than
//! these two dozen statements need.

use postgres::types::{ToSql, Type};

use crate::ServiceError;

/// A value in or out of a statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum V {
    Null,
    I(i64),
    R(f64),
    T(String),
}

impl From<i64> for V {
    fn from(v: i64) -> V {
        V::I(v)
    }
}
impl From<f64> for V {
    fn from(v: f64) -> V {
        V::R(v)
    }
}
impl From<bool> for V {
    fn from(v: bool) -> V {
        V::I(v as i64)
    }
}
impl From<&str> for V {
    fn from(v: &str) -> V {
        V::T(v.to_owned())
    }
}
impl From<String> for V {
    fn from(v: String) -> V {
        V::T(v)
    }
}
impl From<&String> for V {
    fn from(v: &String) -> V {
        V::T(v.clone())
    }
}
impl<T: Into<V>> From<Option<T>> for V {
    fn from(v: Option<T>) -> V {
        v.map_or(V::Null, Into::into)
    }
}

/// Values for a statement: `vals![a, b, c]`.
macro_rules! vals {
    ($($v:expr),* $(,)?) => { &[$($crate::db::sql::V::from($v)),*][..] };
}
pub(crate) use vals;

/// A result row.
#[derive(Debug, Clone)]
pub(crate) struct Row(pub(crate) Vec<V>);

fn wrong(i: usize, want: &str, got: &V) -> ServiceError {
    ServiceError::Database(format!("column {i}: expected {want}, found {got:?}"))
}

impl Row {
    /// Column `i` as `pick` reads it (a missing column reads as NULL); `want` names what
    /// `pick` takes, for the error when it takes nothing.
    fn get<T>(
        &self,
        i: usize,
        want: &str,
        pick: impl FnOnce(&V) -> Option<T>,
    ) -> Result<T, ServiceError> {
        let v = self.0.get(i).unwrap_or(&V::Null);
        pick(v).ok_or_else(|| wrong(i, want, v))
    }
    /// Column `i` by `read`, or `None` where it is NULL or missing.
    fn optional<T>(
        &self,
        i: usize,
        read: fn(&Row, usize) -> Result<T, ServiceError>,
    ) -> Result<Option<T>, ServiceError> {
        match self.0.get(i) {
            Some(V::Null) | None => Ok(None),
            _ => read(self, i).map(Some),
        }
    }
    pub(crate) fn i(&self, i: usize) -> Result<i64, ServiceError> {
        self.get(i, "an integer", |v| match v {
            V::I(v) => Some(*v),
            _ => None,
        })
    }
    pub(crate) fn oi(&self, i: usize) -> Result<Option<i64>, ServiceError> {
        self.optional(i, Row::i)
    }
    pub(crate) fn r(&self, i: usize) -> Result<f64, ServiceError> {
        self.get(i, "a number", |v| match v {
            V::R(v) => Some(*v),
            V::I(v) => Some(*v as f64),
            _ => None,
        })
    }
    pub(crate) fn or(&self, i: usize) -> Result<Option<f64>, ServiceError> {
        self.optional(i, Row::r)
    }
    pub(crate) fn t(&self, i: usize) -> Result<String, ServiceError> {
        self.get(i, "text", |v| match v {
            V::T(v) => Some(v.clone()),
            _ => None,
        })
    }
    pub(crate) fn ot(&self, i: usize) -> Result<Option<String>, ServiceError> {
        self.optional(i, Row::t)
    }
}

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
}

/// A connection.
pub(crate) trait Store: Send {
    fn kind(&self) -> Kind;
    /// Starts a transaction; dropped without [`Tx::commit`], it rolls back.
    fn begin(&mut self) -> Result<Box<dyn Tx + '_>, ServiceError>;
    /// Whether commits reach the disk before they return (SQLite's `synchronous`; PostgreSQL
    /// always syncs).
    fn set_durable(&mut self, durable: bool) -> Result<(), ServiceError>;
}

/// A transaction.
pub(crate) trait Tx {
    fn exec(&mut self, sql: &str, params: &[V]) -> Result<u64, ServiceError>;
    /// Runs a script of several statements with no parameters (schema changes, whose
    /// trigger bodies have semicolons of their own).
    fn script(&mut self, sql: &str) -> Result<(), ServiceError>;
    fn rows(&mut self, sql: &str, params: &[V]) -> Result<Vec<Row>, ServiceError>;
    fn commit(self: Box<Self>) -> Result<(), ServiceError>;

    fn row(&mut self, sql: &str, params: &[V]) -> Result<Option<Row>, ServiceError> {
        Ok(self.rows(sql, params)?.into_iter().next())
    }
}

// ---- SQLite ----

impl Store for rusqlite::Connection {
    fn kind(&self) -> Kind {
        Kind::Sqlite
    }
    fn begin(&mut self) -> Result<Box<dyn Tx + '_>, ServiceError> {
        Ok(Box::new(self.transaction()?))
    }
    fn set_durable(&mut self, durable: bool) -> Result<(), ServiceError> {
        self.pragma_update(None, "synchronous", if durable { "FULL" } else { "NORMAL" })?;
        Ok(())
    }
}

impl rusqlite::ToSql for V {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            V::Null => ToSqlOutput::Owned(Value::Null),
            V::I(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            V::R(v) => ToSqlOutput::Owned(Value::Real(*v)),
            V::T(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
        })
    }
}

impl Tx for rusqlite::Transaction<'_> {
    fn exec(&mut self, sql: &str, params: &[V]) -> Result<u64, ServiceError> {
        let mut st = self.prepare_cached(sql)?;
        Ok(st.execute(rusqlite::params_from_iter(params.iter()))? as u64)
    }
    fn script(&mut self, sql: &str) -> Result<(), ServiceError> {
        self.execute_batch(sql)?;
        Ok(())
    }
    fn rows(&mut self, sql: &str, params: &[V]) -> Result<Vec<Row>, ServiceError> {
        let mut st = self.prepare_cached(sql)?;
        let n = st.column_count();
        let rows = st
            .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    use rusqlite::types::ValueRef;
                    out.push(match r.get_ref(i)? {
                        ValueRef::Null => V::Null,
                        ValueRef::Integer(v) => V::I(v),
                        ValueRef::Real(v) => V::R(v),
                        ValueRef::Text(t) | ValueRef::Blob(t) => {
                            V::T(String::from_utf8_lossy(t).into_owned())
                        }
                    });
                }
                Ok(Row(out))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
    fn commit(self: Box<Self>) -> Result<(), ServiceError> {
        (*self).commit()?;
        Ok(())
    }
}

// ---- PostgreSQL ----

/// A PostgreSQL connection. The synchronous client runs a small runtime of its own, which
/// may not be dropped on an async thread: the last drop hands it to a thread of its own.
pub(crate) struct Pg(pub(crate) Option<postgres::Client>);

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = std::thread::Builder::new()
                .name("ferry-pg-close".into())
                .spawn(move || drop(c));
        }
    }
}

impl Store for Pg {
    fn kind(&self) -> Kind {
        Kind::Postgres
    }
    fn begin(&mut self) -> Result<Box<dyn Tx + '_>, ServiceError> {
        let c = self
            .0
            .as_mut()
            .ok_or_else(|| ServiceError::Database("the connection is closed".into()))?;
        Ok(Box::new(c.transaction()?))
    }
    fn set_durable(&mut self, _: bool) -> Result<(), ServiceError> {
        Ok(())
    }
}

/// `?1` → `$1`: one spelling of placeholders for both databases (no statement here has a `?`
/// in a string literal).
pub(crate) fn dollar_placeholders(sql: &str) -> String {
    sql.replace('?', "$")
}

/// A value as the parameter's declared type asks.
fn pg_param(v: &V, ty: &Type) -> Result<Box<dyn ToSql + Sync>, ServiceError> {
    let bad = || ServiceError::Database(format!("cannot pass {v:?} as {ty}"));
    Ok(match *ty {
        Type::INT8 => Box::new(match v {
            V::Null => None,
            V::I(i) => Some(*i),
            _ => return Err(bad()),
        }),
        Type::INT4 => Box::new(match v {
            V::Null => None,
            V::I(i) => Some(i32::try_from(*i).map_err(|_| bad())?),
            _ => return Err(bad()),
        }),
        Type::FLOAT8 => Box::new(match v {
            V::Null => None,
            V::R(r) => Some(*r),
            V::I(i) => Some(*i as f64),
            _ => return Err(bad()),
        }),
        Type::TEXT | Type::VARCHAR => Box::new(match v {
            V::Null => None,
            V::T(t) => Some(t.clone()),
            _ => return Err(bad()),
        }),
        _ => return Err(bad()),
    })
}

fn pg_value(row: &postgres::Row, i: usize) -> Result<V, ServiceError> {
    let ty = row.columns()[i].type_().clone();
    Ok(match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map_or(V::Null, V::I),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map_or(V::Null, |v| V::I(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map_or(V::Null, V::R),
        Type::NUMERIC => {
            return Err(ServiceError::Database(format!(
                "column {i} is NUMERIC; cast it to BIGINT or DOUBLE PRECISION"
            )))
        }
        _ => row.try_get::<_, Option<String>>(i)?.map_or(V::Null, V::T),
    })
}

/// Prepares `sql` in `tx` and runs it by `run` with `params`, each passed as its declared
/// type asks.
fn pg_run<T>(
    tx: &mut postgres::Transaction<'_>,
    sql: &str,
    params: &[V],
    run: impl FnOnce(
        &mut postgres::Transaction<'_>,
        &postgres::Statement,
        &[&(dyn ToSql + Sync)],
    ) -> Result<T, postgres::Error>,
) -> Result<T, ServiceError> {
    let st = tx.prepare(&dollar_placeholders(sql))?;
    let boxed = st
        .params()
        .iter()
        .zip(params)
        .map(|(ty, v)| pg_param(v, ty))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
    Ok(run(tx, &st, &refs)?)
}

impl Tx for postgres::Transaction<'_> {
    fn exec(&mut self, sql: &str, params: &[V]) -> Result<u64, ServiceError> {
        pg_run(self, sql, params, |tx, st, refs| tx.execute(st, refs))
    }
    fn script(&mut self, sql: &str) -> Result<(), ServiceError> {
        self.batch_execute(sql)?;
        Ok(())
    }
    fn rows(&mut self, sql: &str, params: &[V]) -> Result<Vec<Row>, ServiceError> {
        pg_run(self, sql, params, |tx, st, refs| tx.query(st, refs))?
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| pg_value(r, i))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Row)
            })
            .collect()
    }
    fn commit(self: Box<Self>) -> Result<(), ServiceError> {
        (*self).commit()?;
        Ok(())
    }
}

impl From<postgres::Error> for ServiceError {
    fn from(e: postgres::Error) -> Self {
        ServiceError::Database(match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_values_read_back_from_sqlite() {
        assert_eq!(
            dollar_placeholders("a = ?1 AND b = ?2"),
            "a = $1 AND b = $2"
        );
        let mut c = rusqlite::Connection::open_in_memory().unwrap();
        let mut tx = c.begin().unwrap();
        tx.exec("CREATE TABLE t (a INTEGER, b REAL, c TEXT)", &[])
            .unwrap();
        tx.exec("INSERT INTO t VALUES (?1, ?2, ?3)", vals![7i64, 1.5, "x"])
            .unwrap();
        tx.exec(
            "INSERT INTO t VALUES (?1, ?2, ?3)",
            vals![None::<i64>, None::<f64>, None::<String>],
        )
        .unwrap();
        let rows = tx
            .rows("SELECT a, b, c FROM t ORDER BY a NULLS LAST", &[])
            .unwrap();
        assert_eq!(
            (
                rows[0].i(0).unwrap(),
                rows[0].r(1).unwrap(),
                rows[0].t(2).unwrap()
            ),
            (7, 1.5, "x".into())
        );
        assert_eq!(
            (
                rows[1].oi(0).unwrap(),
                rows[1].or(1).unwrap(),
                rows[1].ot(2).unwrap()
            ),
            (None, None, None)
        );
        assert!(rows[0].t(0).is_err(), "an integer is not text");
        tx.commit().unwrap();
    }
}
