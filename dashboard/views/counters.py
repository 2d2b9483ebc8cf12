"""Counters: the article's lesson table (phase, predicted, observed, match), one line per lesson."""

import streamlit as st

from dashboard import article, run_facts, ui
from dashboard.charts.counters import counter_bars

run = ui.require_run()
ui.run_header(run, "Counters: the article's lessons")
st.markdown(run_facts.counter_rule_text(run.config))

lessons = run_facts.counter_lessons(run.table("counters"), run.config)
if lessons.empty:
    st.info("This run has no counter table.")
else:
    matched = int(lessons["match"].sum())
    st.metric("Phases matching the rule", f"{matched} of {len(lessons)}")
    left, right = st.columns([3, 2])
    with left:
        ui.table(lessons, f"{run.name}-counters.csv", key="counters", label="counters CSV",
                 column_order=["phase", "predicted", "observed", "match"],
                 column_config={"match": st.column_config.CheckboxColumn("match")})
    with right:
        ui.chart(counter_bars(lessons), key="counters_chart")
    st.subheader("The lessons, one line each")
    for phase, why in zip(lessons["phase"], lessons["why"]):
        st.markdown(f"- **{ui.escape_md(phase)}**: {ui.escape_md(why)}")

st.subheader("In the article's words")
st.caption(f"The lessons come from {article.NAME}. Its three lessons, as it states them, and what "
           "its counter showed after the first:")
st.markdown(article.quote(*(article.LESSONS[n] for n in sorted(article.LESSONS)),
                          article.COUNTER_FINDING))
