"""Template tags of durableflow's admin pages."""

from __future__ import annotations

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode

from durableflow.admin.dates import date_hierarchy

register = template.Library()


@register.tag(name="df_date_hierarchy")
def date_hierarchy_tag(parser, token):
    """``{% df_date_hierarchy cl %}``: Django's date hierarchy, without a scan of the table."""
    return InclusionAdminNode(
        parser, token, func=date_hierarchy, template_name="date_hierarchy.html", takes_context=False
    )
