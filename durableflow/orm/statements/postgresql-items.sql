-- The statements of an item task on postgresql, written by tests/orm/test_sql_text.py.

-- claim_item
UPDATE "durableflow_steprecord"
  SET "status" = 'running',
      "attempts" = "attempts" + 1,
      "started_at" = (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second')
  WHERE "execution_id" = %(id)s::text
  AND "key" = %(key)s::text
  AND "kind" = 'item'
  AND ("status" = 'waiting'
  OR ("status" = 'running'
  AND "started_at" < (STATEMENT_TIMESTAMP() + %(ago_lease_seconds)s * INTERVAL '1 second')))
  AND EXISTS (SELECT 1
  FROM "durableflow_execution"
  WHERE "id" = %(id)s::text
  AND "status" IN ('pending', 'running', 'waiting'))
  RETURNING "attempts", "meta", set_config('synchronous_commit', 'off', true);

-- record_item
WITH finished AS (UPDATE "durableflow_steprecord"
  SET "finished_at" = (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second'),
      "status" = %(v_status)s,
      "value" = %(v_value)s::jsonb
  WHERE "execution_id" = %(id)s::text
  AND "key" = %(key)s::text
  AND "status" = 'running'
  AND "attempts" = %(attempt)s::integer
  RETURNING 1),
counted AS (UPDATE "durableflow_steprecord"
  SET "meta" = jsonb_set("meta", '{left}', to_jsonb(("meta" ->> 'left')::integer - 1))
  WHERE "execution_id" = %(id)s::text
  AND "key" = %(step)s::text
  AND ("meta" ->> 'left')::integer > 0
  AND EXISTS (SELECT
  FROM finished)
  RETURNING ("meta" ->> 'left')::integer AS items_left),
woken AS (UPDATE "durableflow_execution"
  SET "enqueued_at" = CASE "status" WHEN %(w1)s THEN (STATEMENT_TIMESTAMP() + %(now)s * INTERVAL '1 second') ELSE "enqueued_at" END,
      "status" = CASE "status" WHEN %(w1)s THEN %(w1_v_status)s ELSE "status" END,
      "wake_at" = CASE "status" WHEN %(w1)s THEN %(w1_v_wake_at)s::timestamptz ELSE "wake_at" END,
      "wake_pending" = CASE "status" WHEN %(w0)s THEN %(w0_v_wake_pending)s ELSE "wake_pending" END
  WHERE "id" = %(id)s::text
  AND "status" IN (%(w0)s, %(w1)s)
  AND EXISTS (SELECT
  FROM counted
  WHERE items_left = 0)
  RETURNING "queue", "status")
  SELECT (SELECT COUNT(*)
  FROM finished), (SELECT items_left
  FROM counted), (SELECT "queue"
  FROM woken), (SELECT "status"
  FROM woken), set_config('synchronous_commit', 'off', true);
