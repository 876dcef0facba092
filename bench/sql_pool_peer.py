#!/usr/bin/env python3
# Peer for bench_sql_pool: the same database, query mix and comparison (set(pred) == set(gold),
# gold results cached) in a Python sqlite3 loop, the way the papers' Python environments run
# model queries. Run by hand: python3 bench/sql_pool_peer.py [db path]
# Pinned: CPython 3.11 (Debian 12), its bundled sqlite3 module (SQLite 3.40.1). No other packages.
import os
import sqlite3
import sys
import time
from concurrent.futures import ThreadPoolExecutor

BUILD = """
CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, country TEXT);
CREATE TABLE events(id INTEGER PRIMARY KEY, user_id INTEGER, kind TEXT, amount REAL, note TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 10000)
INSERT INTO users SELECT i, 'user_' || i, 'country_' || (i % 50) FROM c;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 1000000)
INSERT INTO events SELECT i, (i * 7919) % 10000 + 1, 'kind_' || (i % 13), (i % 1000) * 0.25,
  printf('%080d', i) FROM c;
CREATE INDEX events_user ON events(user_id);
"""

N_QUERIES = 3000


def bench_db(path):
    if not os.path.exists(path):
        tmp = path + ".tmp"
        if os.path.exists(tmp):
            os.remove(tmp)
        conn = sqlite3.connect(tmp)
        conn.executescript(BUILD)
        conn.close()
        os.rename(tmp, path)
    return path


def query(i):
    k = (i * 2654435761) % (2**32) % 9973 + 1
    m = i % 6
    if m == 0:
        return (f"SELECT * FROM events WHERE id = {k * 97}", f"SELECT * FROM events WHERE id = {k * 97}")
    if m == 1:
        return (f"SELECT count(*), sum(amount) FROM events WHERE user_id = {k}",
                f"SELECT count(id), total(amount) FROM events WHERE user_id = {k}")
    if m == 2:
        return (f"SELECT kind, count(*) FROM events WHERE user_id BETWEEN {k} AND {k + 3} GROUP BY kind",
                f"SELECT kind, count(*) FROM events WHERE user_id BETWEEN {k} AND {k + 3} GROUP BY kind ORDER BY kind")
    if m == 3:
        return (f"SELECT u.name, e.amount FROM users u JOIN events e ON e.user_id = u.id WHERE u.id = {k} ORDER BY e.id LIMIT 20",
                f"SELECT u.name, e.amount FROM events e JOIN users u ON e.user_id = u.id WHERE u.id = {k} ORDER BY e.id LIMIT 20")
    if m == 4:
        return (f"SELECT note FROM events WHERE id BETWEEN {k * 50} AND {k * 50 + 40}",
                f"SELECT note FROM events WHERE id >= {k * 50} AND id <= {k * 50 + 40}")
    return (f"SELECT missing_column FROM users WHERE id = {k}", f"SELECT name FROM users WHERE id = {k}")


def execute(conn, sql):
    # As the papers' environments: fetchall, errors caught and reported, 5 s progress-handler cutoff.
    deadline = time.monotonic() + 5.0
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    try:
        return conn.execute(sql).fetchall(), None
    except sqlite3.Error as e:
        return None, str(e)


def run(db, workers, gold):
    local = {}

    def job(i):
        import threading
        conn = local.get(threading.get_ident())
        if conn is None:
            conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            local[threading.get_ident()] = conn
        pred_sql, gold_sql = query(i)
        rows, err = execute(conn, pred_sql)
        return err is None and set(rows) == set(gold[gold_sql])

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as ex:
        matches = sum(ex.map(job, range(N_QUERIES)))
    elapsed = time.perf_counter() - start
    return N_QUERIES / elapsed, matches


def main():
    db = bench_db(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SQLRL_BENCH_DB", "/tmp/sqlrl_bench_pool.sqlite"))
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    gold = {}
    for i in range(N_QUERIES):
        g = query(i)[1]
        if g not in gold:
            gold[g] = conn.execute(g).fetchall()
    for workers in (1, 2, 8):
        best = 0.0
        for _ in range(3):
            qps, matches = run(db, workers, gold)
            best = max(best, qps)
        print(f"python sqlite3 peer: workers={workers} queries/s={best:.0f} matches={matches}/{N_QUERIES}")


if __name__ == "__main__":
    main()
