-- The statements of an item task on sqlite, written by tests/orm/test_sql_text.py.

-- claim_item
UPDATE "durableflow_steprecord"
  SET "status" = 'running',
      "attempts" = "attempts" + 1,
      "started_at" = STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s)
  WHERE "execution_id" = %(id)s
  AND "key" = %(key)s
  AND "kind" = 'item'
  AND ("status" = 'waiting'
  OR ("status" = 'running'
  AND "started_at" < STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(ago_lease_seconds)s)))
  AND EXISTS (SELECT 1
  FROM "durableflow_execution"
  WHERE "id" = %(id)s
  AND "status" IN ('pending', 'running', 'waiting'))
  RETURNING "attempts", "meta";

-- finish_item
UPDATE "durableflow_steprecord"
  SET "finished_at" = STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s),
      "status" = %(v_status)s,
      "value" = %(v_value)s
  WHERE "execution_id" = %(id)s
  AND "key" = %(key)s
  AND "status" = 'running'
  AND "attempts" = %(attempt)s;

-- count_item
UPDATE "durableflow_steprecord"
  SET "meta" = json_set("meta", '$.left', json_extract("meta", '$.left') - 1)
  WHERE "execution_id" = %(id)s
  AND "key" = %(step)s
  AND json_extract("meta", '$.left') > 0
  RETURNING json_extract("meta", '$.left');

-- wake
UPDATE "durableflow_execution"
  SET "enqueued_at" = CASE "status" WHEN %(w1)s THEN STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(now)s) ELSE "enqueued_at" END,
      "status" = CASE "status" WHEN %(w1)s THEN %(w1_v_status)s ELSE "status" END,
      "wake_at" = CASE "status" WHEN %(w1)s THEN %(w1_v_wake_at)s ELSE "wake_at" END,
      "wake_pending" = CASE "status" WHEN %(w0)s THEN %(w0_v_wake_pending)s ELSE "wake_pending" END
  WHERE "id" = %(id)s
  AND "status" IN (%(w0)s, %(w1)s)
  RETURNING "queue", "status";
