"""Mappers: search proposes mappings; check forbids; cost judges. All behind one interface."""

from tileplan.mappers.base import Mapper, MapperOptions, MapperResult, SolverInfo, available_mappers, get_mapper

__all__ = ["Mapper", "MapperOptions", "MapperResult", "SolverInfo", "available_mappers", "get_mapper"]
