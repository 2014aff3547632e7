# The engines' /metrics read (scrape/parse.c) and the URLs scraped.
if(TARGET cacheroute_scrape)
  cr_add_cunit_test(test_scrape_parse SOURCES test_scrape_parse.c LIBS cacheroute_scrape)
endif()
