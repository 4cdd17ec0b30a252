-- The statements of a one-step delivery on sqlite, written by tests/orm/test_sql_text.py.

-- claim
UPDATE "durableflow_execution"
  SET "status" = 'running',
      "lease_token" = %(token)s,
      "lease_expires_at" = STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(until)s),
      "lease_holder" = %(holder)s,
      "deliveries" = "deliveries" + 1,
      "lost_deliveries" = CASE WHEN "lease_token" IS NULL THEN 0 ELSE "lost_deliveries" + 1 END,
      "started_at" = COALESCE("started_at", STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s)),
      "wake_pending" = FALSE
  WHERE "id" = %(id)s
  AND (("status" IN ('pending', 'running')
  OR ("status" = 'waiting'
  AND "wake_at" <= STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s)))
  AND ("lease_token" IS NULL
  OR "lease_expires_at" < STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s)
  OR "lease_token" = %(take_over)s)
  AND "concurrency_ticket" IS NULL)
  RETURNING "workflow", "version", "params", "parent_id", "root_id", "deliveries", "waiting_for", "queue", "cancel_requested", "seed", "lost_deliveries", "trace_context", EXISTS (SELECT 1
  FROM "durableflow_steprecord"
  WHERE "durableflow_steprecord"."execution_id" = "durableflow_execution"."id"), STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s);

-- journal
SELECT "key", "kind", "status", "attempts", "value", "error", "meta", CAST("started_at" AS TEXT), CAST("finished_at" AS TEXT)
  FROM "durableflow_steprecord"
  WHERE "execution_id" = %(id)s;

-- insert_step
INSERT INTO "durableflow_steprecord" ("execution_id", "key", "kind", "status", "attempts", "value", "error", "meta", "started_at", "finished_at")
  SELECT %(execution_id)s, %(key)s, %(kind)s, %(status)s, %(attempts)s, %(value)s, %(error)s, %(meta)s, %(started_at)s, %(finished_at)s
  WHERE EXISTS (SELECT 1
  FROM "durableflow_execution"
  WHERE "id" = %(execution_id)s
  AND "lease_token" = %(token)s)
  ON CONFLICT ("execution_id", "key") DO NOTHING;

-- outcome
UPDATE "durableflow_execution"
  SET "error" = %(v_error)s,
      "finished_at" = STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s),
      "lease_expires_at" = %(v_lease_expires_at)s,
      "lease_token" = %(v_lease_token)s,
      "result" = %(v_result)s,
      "status" = %(v_status)s,
      "waiting_for" = %(v_waiting_for)s,
      "wake_at" = %(v_wake_at)s
  WHERE "id" = %(fence_id)s
  AND "lease_token" = %(fence_token)s
  RETURNING "watched";
