-- The statements of a one-step delivery on postgresql, written by tests/orm/test_sql_text.py.

-- claim
UPDATE "durableflow_execution"
  SET "status" = 'running',
      "lease_token" = %(token)s,
      "lease_expires_at" = (STATEMENT_TIMESTAMP() + %(until)s * INTERVAL '1 second'),
      "lease_holder" = %(holder)s::text,
      "deliveries" = "deliveries" + 1,
      "lost_deliveries" = CASE WHEN "lease_token" IS NULL THEN 0 ELSE "lost_deliveries" + 1 END,
      "started_at" = COALESCE("started_at", (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second')),
      "wake_pending" = FALSE
  WHERE "id" = %(id)s
  AND (("status" IN ('pending', 'running')
  OR ("status" = 'waiting'
  AND "wake_at" <= (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second')))
  AND ("lease_token" IS NULL
  OR "lease_expires_at" < (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second')
  OR "lease_token" = %(take_over)s::text)
  AND "concurrency_ticket" IS NULL)
  RETURNING "workflow", "version", "params", "parent_id", "root_id", "deliveries", "waiting_for", "queue", "cancel_requested", "seed", "lost_deliveries", "trace_context", EXISTS (SELECT 1
  FROM "durableflow_steprecord"
  WHERE "durableflow_steprecord"."execution_id" = "durableflow_execution"."id"), (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second'), set_config('synchronous_commit', 'off', true);

-- journal
SELECT "key", "kind", "status", "attempts", "value", "error", "meta", to_char("started_at" AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), to_char("finished_at" AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
  FROM "durableflow_steprecord"
  WHERE "execution_id" = %(id)s;

-- insert_step
INSERT INTO "durableflow_steprecord" ("execution_id", "key", "kind", "status", "attempts", "value", "error", "meta", "started_at", "finished_at")
  SELECT %(execution_id)s::text, %(key)s::text, %(kind)s::text, %(status)s::text, %(attempts)s::integer, %(value)s::jsonb, %(error)s::jsonb, %(meta)s::jsonb, %(started_at)s::timestamptz, %(finished_at)s::timestamptz
  WHERE EXISTS (SELECT 1
  FROM "durableflow_execution"
  WHERE "id" = %(execution_id)s::text
  AND "lease_token" = %(token)s::text)
  ON CONFLICT ("execution_id", "key") DO NOTHING;

-- outcome
UPDATE "durableflow_execution"
  SET "error" = %(v_error)s::jsonb,
      "finished_at" = (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second'),
      "lease_expires_at" = %(v_lease_expires_at)s::timestamptz,
      "lease_token" = %(v_lease_token)s,
      "result" = %(v_result)s::jsonb,
      "status" = %(v_status)s,
      "waiting_for" = %(v_waiting_for)s::jsonb,
      "wake_at" = %(v_wake_at)s::timestamptz
  WHERE "id" = %(fence_id)s::text
  AND "lease_token" = %(fence_token)s::text
  RETURNING "watched";
